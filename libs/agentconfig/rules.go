package agentconfig

import (
	"maps"
	"slices"
	"time"
)

// The validation rules of each config type. They mirror the JSON Schemas in schemas/ (see
// TestSchemasAgreeWithValidate) and the typed shapes in shapes.go (see TestShapesDecodeValidConfigs).

const maxInt32 = 1<<31 - 1 // counts stay decodable into int on 32-bit agents

// Floors and caps. They bound what one config can make every agent of an environment do: how often it
// polls, publishes or runs something, how much it reads into memory and how many things it watches. The
// README's limits table lists them; a change here is a change of what the API accepts.
const (
	// MinDuration and MaxDuration bound every duration field of every type (intervals, timeouts,
	// flush intervals): nothing an agent does on a timer may run more often than once a second.
	MinDuration = time.Second
	MaxDuration = 24 * time.Hour
	// MaxFileSize caps watch_files.max_file_size: the scanner reads a file whole into memory.
	MaxFileSize = 16 << 20
	// MaxCollectors caps the entries of one collectors list (environment default or host override).
	MaxCollectors = 256
	// MaxStaticLabels and MaxDynamicLabels cap labels.static members and labels.dynamic entries.
	MaxStaticLabels  = 256
	MaxDynamicLabels = 64
	// MaxArgs caps a command label's argv.
	MaxArgs = 64
	// MaxPaths caps every list of paths or patterns (change_detection.paths, watch_files.paths,
	// exclude_patterns and sensitive_files, log files' exclude_paths, journald.units).
	MaxPaths = 128
	// MaxLogFiles caps log_collection.files.
	MaxLogFiles = 128
	// MaxHealthcheckIntervalSeconds and MaxHealthcheckTimeoutSeconds cap the healthcheck type, whose
	// values are whole seconds (at least 1).
	MaxHealthcheckIntervalSeconds = 86400
	MaxHealthcheckTimeoutSeconds  = 3600
	// MaxLogBufferMB caps log_collection.mem_buf_limit_mb.
	MaxLogBufferMB = 4096
)

var (
	boolRule           = &rule{kind: ruleBool}
	stringRule         = &rule{kind: ruleString}
	nonEmptyStringRule = &rule{kind: ruleString, nonEmpty: true}
	durationRule       = &rule{kind: ruleDuration}
	pathListRule       = &rule{kind: ruleList, items: nonEmptyStringRule, maxItems: MaxPaths}
	globListRule       = &rule{kind: ruleList, items: &rule{kind: ruleGlob}, maxItems: MaxPaths}
	portRule           = integerRule(1, 65535)
	// secretRule is a collector field a credential supplies (SecretFields). Validate refuses it: a
	// stored config references a credential_id instead. ValidateDelivered accepts it, as any string,
	// exactly at the pointers the backend reports it injected.
	secretRule = &rule{kind: ruleSecret}
)

func integerRule(lo, hi float64) *rule { return &rule{kind: ruleInteger, min: lo, max: hi} }

func enumRule(values ...string) *rule { return &rule{kind: ruleEnum, enum: values} }

func objectOf(fields map[string]*rule) *rule {
	return &rule{kind: ruleObject, object: &objectRule{fields: fields}}
}

// identityList is a list of objects whose identity members must be unique within the list.
func identityList(o *objectRule, maxItems int, identity ...string) *rule {
	return &rule{kind: ruleList, identity: identity, items: &rule{kind: ruleObject, object: o}, maxItems: maxItems}
}

// Collector types and the fields each adds to the common ones.
const (
	CollectorHTTP     = "http"
	CollectorTCP      = "tcp"
	CollectorPostgres = "postgres"
	CollectorMySQL    = "mysql"
	CollectorRedis    = "redis"
)

// secretFields are the fields a stored credential may hold. InjectSecrets copies each into every
// collector that references the credential, so each must be a string field of every collector type that
// accepts credential_id (TestSecretFieldsValidWhereCredentialsAre keeps them in step).
var secretFields = []string{"password", "username"}

// SecretFields returns the names a credential's secret fields may have, sorted. The backend refuses
// any other name when a credential is created or rotated, because the agent would reject the collector
// it is injected into.
func SecretFields() []string { return slices.Clone(secretFields) }

// IsSecretField reports whether name is one of SecretFields.
func IsSecretField(name string) bool { return slices.Contains(secretFields, name) }

var credentialIDRule = &rule{kind: ruleUUID}

// databaseCollectorFields are the fields every database collector (postgres, mysql, redis) takes.
var databaseCollectorFields = map[string]*rule{
	"host":          nonEmptyStringRule,
	"port":          portRule,
	"database":      stringRule,
	"username":      secretRule,
	"password":      secretRule,
	"credential_id": credentialIDRule,
}

// PostgreSQL sslmode values, with libpq's names and meanings. An absent sslmode means SSLModePrefer.
const (
	SSLModeDisable    = "disable"     // no TLS
	SSLModePrefer     = "prefer"      // TLS when the server offers it, certificate not verified
	SSLModeRequire    = "require"     // TLS or fail, certificate not verified
	SSLModeVerifyFull = "verify-full" // TLS or fail, certificate verified against the system roots and host
)

// postgresCollectorFields are the database fields plus sslmode, which only the postgres check speaks.
var postgresCollectorFields = func() map[string]*rule {
	fields := maps.Clone(databaseCollectorFields)
	fields["sslmode"] = enumRule(SSLModeDisable, SSLModePrefer, SSLModeRequire, SSLModeVerifyFull)
	return fields
}()

// collectorVariants lists the fields of each collector type. credential_id belongs to the types that
// take every secret field; a tcp check has no use for one, so it is refused there by name rather than as
// an unknown key.
var collectorVariants = map[string]map[string]*rule{
	CollectorHTTP: {
		"url":           {kind: ruleURL},
		"method":        enumRule("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"),
		"expect_status": integerRule(100, 599),
		"username":      secretRule, // basic auth
		"password":      secretRule,
		"credential_id": credentialIDRule,
	},
	CollectorTCP: {
		"address":       {kind: ruleAddress},
		"credential_id": {kind: ruleForbidden, message: "tcp collectors take no credentials"},
	},
	CollectorPostgres: postgresCollectorFields,
	CollectorMySQL:    databaseCollectorFields,
	CollectorRedis:    databaseCollectorFields,
}

var collectorsRule = identityList(
	&objectRule{
		noun: "collector",
		fields: map[string]*rule{
			"type":     enumRule(slices.Sorted(maps.Keys(collectorVariants))...),
			"name":     nonEmptyStringRule,
			"enabled":  boolRule,
			"interval": durationRule,
			"timeout":  durationRule,
		},
		required:      []string{"type", "name"},
		discriminator: "type",
		variants:      collectorVariants,
	},
	MaxCollectors, "type", "name",
)

var intervalsRule = objectOf(map[string]*rule{
	"metrics":   durationRule,
	"inventory": durationRule,
	"heartbeat": durationRule,
	"processes": durationRule,
})

// Dynamic label sources.
const (
	LabelSourceFile    = "file"
	LabelSourceCommand = "command"
	LabelSourceEnv     = "env"
)

var labelsRule = objectOf(map[string]*rule{
	"static": {kind: ruleStringMap, maxItems: MaxStaticLabels},
	"dynamic": identityList(
		&objectRule{
			noun: "dynamic label",
			fields: map[string]*rule{
				"name":     nonEmptyStringRule,
				"source":   enumRule(LabelSourceCommand, LabelSourceEnv, LabelSourceFile),
				"interval": durationRule,
			},
			required:      []string{"name", "source"},
			discriminator: "source",
			variants: map[string]map[string]*rule{
				LabelSourceFile:    {"path": nonEmptyStringRule},
				LabelSourceCommand: {"command": {kind: ruleArgv, maxItems: MaxArgs}},
				LabelSourceEnv:     {"env": nonEmptyStringRule},
			},
		},
		MaxDynamicLabels, "name",
	),
})

var changeDetectionRule = objectOf(map[string]*rule{
	"enabled":  boolRule,
	"paths":    pathListRule,
	"interval": durationRule,
})

var logCollectionRule = objectOf(map[string]*rule{
	"files": identityList(
		&objectRule{
			noun: "log file",
			fields: map[string]*rule{
				"name":           nonEmptyStringRule,
				"path":           nonEmptyStringRule,
				"exclude_paths":  pathListRule,
				"parser":         nonEmptyStringRule,
				"tag":            nonEmptyStringRule,
				"read_from_head": boolRule,
			},
			required: []string{"name"},
		},
		MaxLogFiles, "name",
	),
	"journald": objectOf(map[string]*rule{
		"enabled":        boolRule,
		"units":          pathListRule,
		"read_from_tail": boolRule,
	}),
	"enabled":          boolRule,
	"flush_interval":   durationRule,
	"mem_buf_limit_mb": integerRule(0, MaxLogBufferMB),
})

// Log levels, in the orders the spec lists them.
var (
	agentLogLevels    = []string{"debug", "info", "warn", "error"}
	shippingLogLevels = []string{"error", "warn", "info", "debug"}
)

var agentSettingsRule = objectOf(map[string]*rule{
	"collector_timeout": durationRule,
	"memory_limit_mb":   integerRule(0, maxInt32),
	"log_level":         enumRule(agentLogLevels...),
})

var watchFilesRule = objectOf(map[string]*rule{
	"paths":            pathListRule,
	"exclude_patterns": globListRule,
	"sensitive_files":  globListRule,
	"max_file_size":    integerRule(1, MaxFileSize),
})

var healthcheckRule = objectOf(map[string]*rule{
	"interval_seconds": integerRule(1, MaxHealthcheckIntervalSeconds),
	"timeout_seconds":  integerRule(1, MaxHealthcheckTimeoutSeconds),
})

var tracingRule = objectOf(map[string]*rule{
	"enabled":      boolRule,
	"sample_ratio": {kind: ruleNumber, min: 0, max: 1},
})

var logShippingRule = objectOf(map[string]*rule{
	"enabled": boolRule,
	"level":   enumRule(shippingLogLevels...),
})
