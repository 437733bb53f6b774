package console

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"time"

	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/runtime"
)

type pluginKind struct {
	Key   string
	Types []pluginType
}

type pluginType struct {
	runtime.TypeInfo
	Served bool
	Groups []paramGroup
}

type paramGroup struct {
	Name     string
	Fields   []paramField
	Required [][]string
}

type paramField struct {
	Name string
	runtime.Field
	DefaultJSON string
}

type pluginsData struct {
	Kinds      []pluginKind
	Errors     []*runtime.LoadError
	Warnings   []*runtime.LoadError
	LastReload *reloadRecord
	CanReload  bool
	CLI        string
}

// fieldsOf reads the declared parameters of a type's definition.
func fieldsOf(raw []byte) []paramGroup {
	var def struct {
		Parameters map[string]*runtime.ParameterGroup `json:"parameters"`
	}
	if json.Unmarshal(raw, &def) != nil {
		return nil
	}
	var out []paramGroup
	for name, g := range def.Parameters {
		if g == nil {
			continue
		}
		pg := paramGroup{Name: name, Required: g.Required}
		for fname, f := range g.Fields {
			if f == nil {
				continue
			}
			pf := paramField{Name: fname, Field: *f}
			if f.Default != nil {
				if f.Sensitive || f.Type == "password" {
					pf.DefaultJSON = "[REDACTED]"
				} else if b, err := json.Marshal(f.Default); err == nil {
					pf.DefaultJSON = string(b)
				}
			}
			pg.Fields = append(pg.Fields, pf)
		}
		sort.Slice(pg.Fields, func(i, j int) bool { return pg.Fields[i].Name < pg.Fields[j].Name })
		out = append(out, pg)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func (c *Console) plugins(w http.ResponseWriter, r *http.Request) {
	d := pluginsData{CanReload: c.cfg.Reload != nil && !c.readOnly(r) && tokenOf(r).Admin(), CLI: "loomd plugins --plugins DIR"}
	if c.cfg.Plugins != nil {
		byKey := map[string]*pluginKind{}
		for _, t := range c.cfg.Plugins.Types() {
			k := byKey[t.Key]
			if k == nil {
				k = &pluginKind{Key: t.Key}
				byKey[t.Key] = k
			}
			served, _ := c.cfg.Queue.Served(queue.Route{Family: string(t.Family), Type: t.Name})
			k.Types = append(k.Types, pluginType{TypeInfo: t, Served: served, Groups: fieldsOf(t.Raw)})
		}
		for _, k := range byKey {
			sort.Slice(k.Types, func(i, j int) bool { return k.Types[i].Name < k.Types[j].Name })
			d.Kinds = append(d.Kinds, *k)
		}
		sort.Slice(d.Kinds, func(i, j int) bool { return d.Kinds[i].Key < d.Kinds[j].Key })
		for _, e := range c.cfg.Plugins.LoadErrors() {
			if e.Warning {
				d.Warnings = append(d.Warnings, e)
			} else {
				d.Errors = append(d.Errors, e)
			}
		}
	}
	c.reloadMu.Lock()
	d.LastReload = c.lastReload
	c.reloadMu.Unlock()
	c.render(w, r, http.StatusOK, "plugins", &view{Title: "Plugins", Nav: "plugins", Topics: []string{topicPlugins}, Data: d})
}

// Reloaded records a reload the daemon ran (the hot reload, or the
// console's action) and tells open pages.
func (c *Console) Reloaded(res ReloadResult, err error) {
	rec := &reloadRecord{At: c.cfg.Now(), Result: res}
	if err != nil {
		rec.Err = err.Error()
	}
	c.reloadMu.Lock()
	c.lastReload = rec
	c.reloadMu.Unlock()
	c.PluginsChanged()
}

func (c *Console) reloadConfirm(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Reload == nil || c.readOnly(r) || !tokenOf(r).Admin() {
		c.refuse(w, r, http.StatusForbidden, "Reloading from the console is not yours to do.", "A reload changes what every tenant runs: it takes an admin token that may write, and a console without --ui-readonly.")
		return
	}
	c.render(w, r, http.StatusOK, "confirm", &view{Title: "Reload the plugins?", Nav: "plugins", Data: map[string]any{
		"Action": &taskAction{Name: "reload", Label: "Reload", CLI: ""},
		"Back":   Prefix + "/plugins", "Post": Prefix + "/plugins/reload",
		"What": "loomd rescans --plugins now, as the hot reload does when a file changes: new and changed plugins load, " +
			"a plugin that fails to load keeps its previous version serving, and its errors show here.",
	}})
}

func (c *Console) reload(w http.ResponseWriter, r *http.Request) {
	if c.cfg.Reload == nil || !tokenOf(r).Admin() {
		c.refuse(w, r, http.StatusForbidden, "Reloading from the console is not yours to do.", "A reload changes what every tenant runs: it takes an admin token that may write.")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Minute)
	defer cancel()
	res, err := c.cfg.Reload(ctx)
	c.Reloaded(res, err)
	c.log.Info("console: plugin reload", "by", sessionOf(r).Subject, "err", err)
	if err != nil {
		c.unavailable(w, r, "reloading the plugins", err)
		return
	}
	http.Redirect(w, r, query(Prefix+"/plugins", "done", "reloaded"), http.StatusSeeOther)
}
