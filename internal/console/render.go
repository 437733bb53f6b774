package console

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"math"
	"net/http"
	"path"
	"strings"
	"time"

	"github.com/loomrt/loom/runtime"
)

// view is what every page template gets.
type view struct {
	Title string
	// Nav is the menu entry to mark current.
	Nav string
	// Topics are the live topics the page follows (data-events).
	Topics []string
	// Flash is a fixed message after an action.
	Flash string
	Data  any

	// Filled in by render.
	CSRF     string
	ReadOnly bool
	Open     bool   // no token: no sign-out
	Who      string // the token signed in with, for the header
	Coopr    bool
	AssetV   string
	Path     string
}

func parseTemplates() (map[string]*template.Template, error) {
	names, err := fs.Glob(templateFS, "web/templates/*.html")
	if err != nil {
		return nil, err
	}
	out := map[string]*template.Template{}
	for _, n := range names {
		base := strings.TrimSuffix(path.Base(n), ".html")
		if base == "layout" || base == "partials" {
			continue
		}
		t, err := template.New(base).Funcs(funcs).ParseFS(templateFS, "web/templates/layout.html", "web/templates/partials.html", n)
		if err != nil {
			return nil, fmt.Errorf("console: parsing template %s: %w", n, err)
		}
		out[base] = t
	}
	return out, nil
}

// assetVersion names the embedded assets' content, for cache busting.
func assetVersion() string {
	h := sha256.New()
	_ = fs.WalkDir(staticFS, "web/static", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			b, _ := staticFS.ReadFile(p)
			h.Write([]byte(p))
			h.Write(b)
		}
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// render executes a page into a buffer first, so a template error is a
// clean 500, never half a page.
func (c *Console) render(w http.ResponseWriter, r *http.Request, code int, page string, v *view) {
	t := c.pages[page]
	if t == nil {
		http.Error(w, "no template "+page, http.StatusInternalServerError)
		return
	}
	if s := sessionOf(r); s != nil {
		v.CSRF = s.csrf
	}
	if f := flashes[r.URL.Query().Get("done")]; f != "" {
		v.Flash = f
	}
	tok := tokenOf(r)
	v.ReadOnly, v.Open, v.Coopr, v.AssetV, v.Path = c.readOnly(r), c.keys.open, c.cfg.Coopr != nil && tok.Admin(), c.assetV, r.URL.Path
	if !c.keys.open {
		v.Who = tok.String()
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, "layout", v); err != nil {
		c.log.Error("console: rendering a page failed", "page", page, "err", err)
		http.Error(w, "rendering the page failed: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}

var funcs = template.FuncMap{
	"rfc3339": func(t any) string {
		if tt := toTime(t); !tt.IsZero() {
			return tt.UTC().Format(time.RFC3339Nano)
		}
		return ""
	},
	"utc": func(t any) string {
		if tt := toTime(t); !tt.IsZero() {
			return tt.UTC().Format("2006-01-02 15:04:05 UTC")
		}
		return "—"
	},
	"since": func(t any) string {
		if tt := toTime(t); !tt.IsZero() {
			return human(time.Since(tt)) + " ago"
		}
		return ""
	},
	"between": func(a, b any) string {
		ta, tb := toTime(a), toTime(b)
		if ta.IsZero() || tb.IsZero() {
			return ""
		}
		return human(tb.Sub(ta))
	},
	"ms":    func(ms float64) string { return human(time.Duration(ms * float64(time.Millisecond))) },
	"secs":  func(s float64) string { return human(time.Duration(s * float64(time.Second))) },
	"bytes": func(n int64) string { return runtime.FormatSize(n) },
	"pct":   func(a, b int) int { return int(math.Round(100 * float64(a) / math.Max(float64(b), 1))) },
	"rate": func(perSec float64) string {
		switch {
		case perSec == 0:
			return "0/s"
		case perSec < 1:
			return fmt.Sprintf("%.1f/min", perSec*60)
		}
		return fmt.Sprintf("%.1f/s", perSec)
	},
	"join": strings.Join,
	"list": func(s ...string) []string { return s },
	"add":  func(a, b int) int { return a + b },
	"deref": func(p *int) int {
		if p == nil {
			return 0
		}
		return *p
	},
	"pretty": func(b []byte) string {
		var buf bytes.Buffer
		if json.Indent(&buf, b, "", "  ") == nil {
			return buf.String()
		}
		return string(b)
	},
	"stateClass": func(s any) string { return "st-" + strings.ToLower(fmt.Sprint(s)) },
	"topics":     func(t []string) string { return strings.Join(t, " ") },
	"eq":         func(a, b any) bool { return fmt.Sprint(a) == fmt.Sprint(b) },
}

func toTime(t any) time.Time {
	switch x := t.(type) {
	case time.Time:
		return x
	case *time.Time:
		if x != nil {
			return *x
		}
	}
	return time.Time{}
}

// human is a duration as a person reads it: 850ms, 4.2s, 3m10s, 2h5m, 3d4h.
func human(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d.Microseconds())
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd%02dh", int(d.Hours())/24, int(d.Hours())%24)
}
