package cli

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/loomrt/loom/internal/api"
	"github.com/loomrt/loom/internal/coopr"
	"github.com/loomrt/loom/internal/queue"
	"github.com/loomrt/loom/internal/tokens"
	"github.com/loomrt/loom/internal/worker"
	"github.com/loomrt/loom/runtime"
)

// uiDeps are the daemon's parts the web console reads and acts on.
type uiDeps struct {
	token    string
	tokens   *tokens.Set
	readOnly bool
	queue    *queue.Queue
	plugins  api.Plugins
	metrics  *api.Metrics
	coopr    func() coopr.Status
	tenant   string
	late     *api.Late // the cluster jobs, their log, the task logs
	workers  func() []worker.Info
	reload   func(ctx context.Context) (runtime.ReloadReport, error)
	logger   *slog.Logger
}

// webConsole is the console as loomd serve uses it.
type webConsole interface {
	Handler() http.Handler
	Close()
	Reloaded(runtime.ReloadReport, error)
}
