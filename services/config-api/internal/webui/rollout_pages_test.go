package webui

import (
	"net/url"
	"strings"
	"testing"
)

// TestPlanOf: the editor's stages field reads "1,5%,25%,100%" as the API's plan (a number is a count of
// hosts, N% a cumulative percentage); empty fields are left to the service's defaults; a token that is
// neither is refused naming its stage.
func TestPlanOf(t *testing.T) {
	p, err := planOf(url.Values{"stages": {" 1, 5% ,25%,100% "}, "bake_seconds": {"60"}, "auto_revert": {"yes"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Stages) != 4 || p.Stages[0].Hosts != 1 || p.Stages[0].Percent != 0 || p.Stages[1].Percent != 5 ||
		p.Stages[2].Percent != 25 || p.Stages[3].Percent != 100 || p.Stages[3].Hosts != 0 ||
		p.BakeSeconds == nil || *p.BakeSeconds != 60 || !p.AutoRevert {
		t.Fatalf("plan %+v", p)
	}
	p, err = planOf(url.Values{})
	if err != nil || p.Stages != nil || p.BakeSeconds != nil || p.Gate != nil || p.AutoRevert {
		t.Fatalf("empty form: %+v, %v; want the zero plan (the service's defaults)", p, err)
	}
	for _, c := range []struct{ field, value, want string }{
		{"stages", "1,x%", "plan.stages[1]"},
		{"stages", "1,,100%", "plan.stages[1]"},
		{"bake_seconds", "5m", "plan.bake_seconds"},
	} {
		if _, err := planOf(url.Values{c.field: {c.value}}); err == nil || !strings.Contains(message(err), c.want) {
			t.Errorf("%s=%q: error %v, want one naming %s", c.field, c.value, err, c.want)
		}
	}
}
