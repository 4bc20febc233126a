package health

import "go.uber.org/fx"

// ReadinessGroup is the fx value group collecting every Check; httpserver's /readyz consumes it.
const ReadinessGroup = "readiness"

// AsCheck annotates a constructor returning a Check so that its result joins the "readiness" group:
//
//	fx.Provide(health.AsCheck(func(pool *pgxpool.Pool) health.Check { ... }))
func AsCheck(f any) any {
	return fx.Annotate(f, fx.ResultTags(`group:"`+ReadinessGroup+`"`))
}
