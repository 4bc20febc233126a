module github.com/configsync/configsync/tools/cfgctl

go 1.26

require (
	go.uber.org/goleak v1.3.0
	gopkg.in/yaml.v3 v3.0.1 // indirect
)
