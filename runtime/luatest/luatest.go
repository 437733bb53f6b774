// Package luatest is a harness for testing Loom plugins and the runtime
// from Go: write a plugin folder, build a loaded runtime with the real
// sandbox, make Coopr tasks and run them.
//
//	dir := t.TempDir()
//	luatest.WritePlugin(t, dir, luatest.Plugin{Name: "p", Type: "p", Family: "provider",
//		Classname: "P", Files: map[string]string{"p.lua": `P = {} function P:create(i) end`}})
//	rt := luatest.NewRuntime(t, runtime.Options{PluginsDir: dir})
//	res := luatest.Run(t, rt, luatest.Task("CREATE", "p", nil))
package luatest

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/loomrt/loom/runtime"
)

// Plugin describes a plugin folder to write.
type Plugin struct {
	// Name is the plugin and folder name.
	Name string
	// Type is the single type it declares; defaults to Name.
	Type string
	// Family is a kind's family: "provider", "automator",
	// "clusterdriver", "bucketprovisioner", "cloudprovider" or
	// "kloudprovider".
	Family string
	// Classname is the entry table's global name.
	Classname string
	// Files maps paths inside the folder to their content.
	Files map[string]string
	// Extra is merged into the type's object (parameters, main...).
	Extra map[string]any
	// Top is merged into the definition's top level (timeouts...).
	Top map[string]any
}

// WritePlugin writes p as <dir>/<p.Name>/ and returns the folder.
func WritePlugin(t testing.TB, dir string, p Plugin) string {
	t.Helper()
	if p.Type == "" {
		p.Type = p.Name
	}
	typ := map[string]any{"name": p.Type, "classname": p.Classname}
	for k, v := range p.Extra {
		typ[k] = v
	}
	key := p.Family + "types"
	if k := runtime.KindOf(runtime.Family(p.Family)); k != nil {
		key = k.Key
	}
	def := map[string]any{"name": p.Name, key: []string{p.Type}, p.Type: typ}
	for k, v := range p.Top {
		def[k] = v
	}
	folder := filepath.Join(dir, p.Name)
	data, _ := json.MarshalIndent(def, "", "  ")
	WriteFile(t, filepath.Join(folder, p.Name+".json"), string(data))
	for name, content := range p.Files {
		WriteFile(t, filepath.Join(folder, name), content)
	}
	return folder
}

// WriteFile writes a file, creating its parent dirs.
func WriteFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// NewRuntime builds and loads a runtime, closed when the test ends.
// WorkDir defaults to a temp dir.
func NewRuntime(t testing.TB, opts runtime.Options) *runtime.Runtime {
	t.Helper()
	if opts.WorkDir == "" {
		opts.WorkDir = t.TempDir()
	}
	rt, err := runtime.New(opts)
	if err != nil {
		t.Fatalf("runtime.New: %v", err)
	}
	t.Cleanup(func() { rt.Close() })
	if err := rt.Load(context.Background()); err != nil {
		t.Fatalf("Load: %v", err)
	}
	return rt
}

// Task returns a Coopr task JSON for taskName, routed to plugin type typ,
// with extra config keys merged in. It fills ids and the keys dispatch
// reads (provider.providertype, service.action.type, automators).
func Task(taskName, typ string, config map[string]any) []byte {
	cfg := map[string]any{"hostname": "node1.example.com", "flavor": "small", "image": "debian"}
	switch taskName {
	case "CREATE", "CONFIRM", "DELETE":
		cfg["provider"] = map[string]any{"providertype": typ, "provisioner": map[string]any{}}
	case "BOOTSTRAP":
		cfg["automators"] = []string{typ}
		cfg["ipaddresses"] = map[string]any{"access_v4": "127.0.0.1"}
	default:
		cfg["service"] = map[string]any{"name": "svc", "action": map[string]any{"type": typ, "fields": map[string]any{}}}
		cfg["ipaddresses"] = map[string]any{"access_v4": "127.0.0.1"}
	}
	for k, v := range config {
		cfg[k] = v
	}
	b, _ := json.Marshal(map[string]any{
		"taskId": "t-1", "jobId": "j-1", "clusterId": "c-1", "nodeId": "n-1",
		"taskName": taskName, "config": cfg,
	})
	return b
}

// Run runs a task and fails the test if it could not run at all.
func Run(t testing.TB, rt *runtime.Runtime, task []byte) *runtime.Result {
	t.Helper()
	res, err := rt.Run(context.Background(), task)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

// Call runs one hook of a called kind with input (nil means {}) and fails
// the test if the call could not run at all.
func Call(t testing.TB, rt *runtime.Runtime, typ, hook string, input any) *runtime.CallResult {
	t.Helper()
	c := &runtime.CallRequest{CallID: "call-1", Type: typ, Hook: hook}
	if input != nil {
		b, err := json.Marshal(input)
		if err != nil {
			t.Fatalf("encoding the input: %v", err)
		}
		c.Input = b
	}
	res, err := rt.Call(context.Background(), c)
	if err != nil {
		t.Fatalf("Call %s %s: %v", typ, hook, err)
	}
	return res
}

// LogBuffer is a concurrency-safe buffer for a JSON slog logger.
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (b *LogBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything logged.
func (b *LogBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Logger returns a debug-level JSON logger writing to b.
func (b *LogBuffer) Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
