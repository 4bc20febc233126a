package webui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"time"

	"go.uber.org/zap"
)

// pageNames are the page templates (templates/NAME.html), each parsed with templates/layout.html.
var pageNames = []string{"signin", "error", "overview", "hosts", "host", "editor", "revisions", "progress", "credentials", "audit", "rollouts", "rollout"}

// view is what every template receives: the layout's fields and the page's own Data.
type view struct {
	Title       string
	SignedIn    bool
	Name        string
	Admin       bool
	CSRF        string
	HTMXVersion string
	Data        any
}

// WithData is the view with other page data, for a sub-template that renders a part of the page.
func (v view) WithData(data any) view {
	v.Data = data
	return v
}

func parseTemplates() (map[string]*template.Template, error) {
	out := make(map[string]*template.Template, len(pageNames))
	for _, name := range pageNames {
		t, err := template.New(name).Funcs(funcs).ParseFS(templateFS, "templates/layout.html", "templates/"+name+".html")
		if err != nil {
			return nil, fmt.Errorf("webui: parse template %s: %w", name, err)
		}
		out[name] = t
	}
	return out, nil
}

var funcs = template.FuncMap{
	"pretty":  prettyJSON,
	"time":    formatTime,
	"ago":     ago,
	"deref":   deref,
	"derefi":  derefInt,
	"itoa":    strconv.Itoa,
	"i64":     func(n int64) string { return strconv.FormatInt(n, 10) },
	"percent": percent,
}

func (c *Console) view(req *request, title string, data any) view {
	v := view{Title: title, HTMXVersion: htmxVersion, Data: data}
	if req != nil && req.session.ID != "" {
		v.SignedIn, v.Name, v.Admin, v.CSRF = true, req.p.Name, req.p.Admin(), req.session.CSRFToken()
	}
	return v
}

// render writes a whole page.
func (c *Console) render(w http.ResponseWriter, status int, page string, req *request, title string, data any) {
	c.execute(w, status, page, "layout", c.view(req, title, data))
}

// renderFragment writes one named template of a page (an htmx partial).
func (c *Console) renderFragment(w http.ResponseWriter, status int, page, name string, data any) {
	v, ok := data.(view)
	if !ok {
		v = view{Data: data}
	}
	c.execute(w, status, page, name, v)
}

// renderPart writes a page, or only its fragment name for an htmx request.
func (c *Console) renderPart(w http.ResponseWriter, req *request, status int, page, name, title string, data any) {
	if req.htmx {
		c.execute(w, status, page, name, c.view(req, title, data))
		return
	}
	c.render(w, status, page, req, title, data)
}

func (c *Console) execute(w http.ResponseWriter, status int, page, name string, v view) {
	t, ok := c.pages[page]
	if !ok {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	// Render into a buffer first, so that a template failure becomes a clean 500, not half a page.
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, name, v); err != nil {
		c.log.Error("console template failed", zap.String("template", page+"/"+name), zap.Error(err))
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	h.Set("Vary", "HX-Request")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// prettyJSON indents a JSON document for display; anything unparsable is shown as is.
func prettyJSON(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var buf bytes.Buffer
	if err := json.Indent(&buf, raw, "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

func formatTime(t any) string {
	switch v := t.(type) {
	case time.Time:
		if v.IsZero() {
			return "—"
		}
		return v.UTC().Format("2006-01-02 15:04:05 UTC")
	case *time.Time:
		if v == nil {
			return "never"
		}
		return formatTime(*v)
	}
	return ""
}

// ago is how long before now t was (a *time.Time, nil: never, or a time.Time).
func ago(v any) string {
	var t time.Time
	switch v := v.(type) {
	case *time.Time:
		if v == nil {
			return "never"
		}
		t = *v
	case time.Time:
		t = v
	default:
		return ""
	}
	d := time.Since(t).Round(time.Second)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func derefInt(n *int64) string {
	if n == nil {
		return "—"
	}
	return strconv.FormatInt(*n, 10)
}

func percent(part, whole int) string {
	if whole <= 0 {
		return "0"
	}
	return strconv.Itoa(part * 100 / whole)
}
