module github.com/configsync/configsync/tools/cfgctl

go 1.26

require (
	go.uber.org/goleak v1.3.0
	go.yaml.in/yaml/v3 v3.0.6
)
