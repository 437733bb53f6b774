//go:build !noui

package cli

import (
	"context"
	"net/http"

	"github.com/loomrt/loom/internal/console"
	"github.com/loomrt/loom/runtime"
)

// startUI builds the web console (internal/console) on the daemon's
// parts. `go build -tags noui` leaves it out of the binary (ui_off.go).
func startUI(d uiDeps) (webConsole, error) {
	cfg := console.Config{Token: d.token, Tokens: d.tokens, ReadOnly: d.readOnly, Queue: d.queue, Plugins: d.plugins, Changes: d.queue,
		Metrics: d.metrics.TaskGatherer(), Coopr: d.coopr, DefaultTenant: d.tenant, Late: d.late,
		Workers: d.workers, Logger: d.logger,
		Reload: func(ctx context.Context) (console.ReloadResult, error) {
			rep, err := d.reload(ctx)
			return consoleReload(rep), err
		}}
	c, err := console.New(cfg)
	if err != nil {
		return nil, err
	}
	return consoleUI{c}, nil
}

type consoleUI struct{ c *console.Console }

func (u consoleUI) Handler() http.Handler { return u.c.Handler() }
func (u consoleUI) Close()                { u.c.Close() }
func (u consoleUI) Reloaded(rep runtime.ReloadReport, err error) {
	u.c.Reloaded(consoleReload(rep), err)
}

// consoleReload is a reload report as the console shows it.
func consoleReload(rep runtime.ReloadReport) console.ReloadResult {
	n := 0
	for _, e := range rep.Errors {
		if !e.Warning {
			n++
		}
	}
	return console.ReloadResult{Added: rep.Added, Updated: rep.Updated, Removed: rep.Removed, Kept: rep.Kept, Errors: n}
}
