// Package envconfig fills configuration structs from environment variables, driven by struct tags:
//
//	type Config struct {
//		URL      string        `env:"DATABASE_URL" required:"true"`
//		MaxConns int32         `env:"DATABASE_MAX_CONNS" default:"10"`
//		Timeout  time.Duration `env:"HTTP_TIMEOUT" default:"5s"`
//		Peers    []string      `env:"PEERS"` // comma separated
//	}
//
// Supported field kinds: string, bool, every signed and unsigned integer size, float32/float64,
// time.Duration, []string and nested structs (walked, with or without an env tag). Every missing or
// invalid variable is reported in one error, so an operator fixes a deployment in one round.
package envconfig

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Lookup finds the value of an environment variable; os.LookupEnv is the default.
type Lookup func(name string) (string, bool)

// Error lists every problem found while loading a configuration.
type Error struct {
	Problems []string
}

func (e *Error) Error() string {
	return "config: " + strings.Join(e.Problems, "; ")
}

// Load fills the struct dst points to from the process environment.
func Load(dst any) error {
	return LoadFrom(dst, os.LookupEnv)
}

// LoadFrom fills the struct dst points to, reading variables through lookup.
func LoadFrom(dst any, lookup Lookup) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("config: destination must be a non-nil pointer to a struct, got %T", dst)
	}
	var problems []string
	walk(v.Elem(), lookup, &problems)
	if len(problems) > 0 {
		return &Error{Problems: problems}
	}
	return nil
}

var durationType = reflect.TypeFor[time.Duration]()

func walk(v reflect.Value, lookup Lookup, problems *[]string) {
	t := v.Type()
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		fv := v.Field(i)
		name, hasName := f.Tag.Lookup("env")
		if f.Type.Kind() == reflect.Struct && f.Type != durationType && !hasName {
			walk(fv, lookup, problems)
			continue
		}
		if !hasName || name == "" || name == "-" {
			continue
		}
		raw, ok := lookup(name)
		if !ok || raw == "" {
			def, hasDefault := f.Tag.Lookup("default")
			switch {
			case hasDefault:
				raw = def
			case f.Tag.Get("required") == "true":
				*problems = append(*problems, name+" is required")
				continue
			default:
				continue
			}
		}
		if err := set(fv, raw); err != nil {
			*problems = append(*problems, fmt.Sprintf("%s: %v", name, err))
		}
	}
}

// errUnsupported marks a field kind Load cannot fill (a programming error, still reported by name).
var errUnsupported = errors.New("unsupported field type")

func set(fv reflect.Value, raw string) error {
	if fv.Type() == durationType {
		d, err := time.ParseDuration(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("invalid duration %q (want e.g. 500ms, 5s, 1m)", raw)
		}
		fv.SetInt(int64(d))
		return nil
	}
	switch fv.Kind() {
	case reflect.String:
		fv.SetString(raw)
	case reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(raw))
		if err != nil {
			return fmt.Errorf("invalid boolean %q (want true or false)", raw)
		}
		fv.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, fv.Type().Bits())
		if err != nil {
			return fmt.Errorf("invalid integer %q", raw)
		}
		fv.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(strings.TrimSpace(raw), 10, fv.Type().Bits())
		if err != nil {
			return fmt.Errorf("invalid unsigned integer %q", raw)
		}
		fv.SetUint(n)
	case reflect.Float32, reflect.Float64:
		f, err := strconv.ParseFloat(strings.TrimSpace(raw), fv.Type().Bits())
		if err != nil {
			return fmt.Errorf("invalid number %q", raw)
		}
		fv.SetFloat(f)
	case reflect.Slice:
		if fv.Type().Elem().Kind() != reflect.String {
			return fmt.Errorf("%w %s", errUnsupported, fv.Type())
		}
		var items []string
		for item := range strings.SplitSeq(raw, ",") {
			if item = strings.TrimSpace(item); item != "" {
				items = append(items, item)
			}
		}
		s := reflect.MakeSlice(fv.Type(), len(items), len(items))
		for i, item := range items {
			s.Index(i).SetString(item)
		}
		fv.Set(s)
	default:
		return fmt.Errorf("%w %s", errUnsupported, fv.Type())
	}
	return nil
}
