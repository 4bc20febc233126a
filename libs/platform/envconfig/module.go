package envconfig

import "go.uber.org/fx"

// Provide returns an fx option providing a T loaded from the environment with Load. A missing or invalid
// variable fails application start with an error naming every problem.
func Provide[T any]() fx.Option {
	return fx.Provide(func() (T, error) {
		var cfg T
		if err := Load(&cfg); err != nil {
			return cfg, err
		}
		return cfg, nil
	})
}
