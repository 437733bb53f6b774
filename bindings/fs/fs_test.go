package fs_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loomrt/loom/bindings/bindingstest"
	"github.com/loomrt/loom/bindings/fs"
	jsonb "github.com/loomrt/loom/bindings/json"
	lua "github.com/yuin/gopher-lua"
)

func TestReadWriteConfined(t *testing.T) {
	h := bindingstest.NewHost(t)
	h.Work = filepath.Join(t.TempDir(), "default", "providertypes", "p")
	os.WriteFile(filepath.Join(h.Dir, "data.txt"), []byte("plugin data"), 0o644)
	L := bindingstest.NewState(t, h, fs.New())
	bindingstest.Run(t, L, `
		local fs = require("loom.fs")
		fs.write("sub/a.txt", "hello", {mode = "0640"})
		assert(fs.read("sub/a.txt") == "hello")
		assert(fs.exists("sub/a.txt"))
		assert(fs.list("sub")[1] == "a.txt")
		assert(fs.read("`+filepath.Join(h.Dir, "data.txt")+`") == "plugin data")
		assert(fs.remove("sub/a.txt") == true)
		assert(fs.remove("sub/a.txt") == false)
	`)
	for code, want := range map[string]string{
		`require("loom.fs").read("/etc/passwd")`:                            "outside the hook's work dir",
		`require("loom.fs").read("../../../../../etc/passwd")`:              "outside the hook's work dir",
		`require("loom.fs").write("` + filepath.Join(h.Dir, "x") + `", "")`: "read-only",
		`require("loom.fs").write("x", "", {mode = "rwx"})`:                 "octal",
		`require("loom.fs").read("missing")`:                                "missing does not exist",
	} {
		err := L.DoString(code)
		if msg := bindingstest.ErrorMessage(err); !strings.Contains(msg, want) {
			t.Errorf("%s: got %q, want %q", code, msg, want)
		}
	}
	// A symlink inside the work dir pointing outside is refused too.
	os.MkdirAll(h.Work, 0o755)
	os.Symlink("/etc", filepath.Join(h.Work, "etc"))
	if err := L.DoString(`require("loom.fs").read("etc/passwd")`); err == nil {
		t.Fatal("read through a symlink escaping the work dir succeeded")
	}
}

func TestWithLockSerializes(t *testing.T) {
	root := t.TempDir()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h := bindingstest.NewHost(t)
			h.Work = root
			L := bindingstest.NewState(t, h, fs.New(), jsonb.New())
			bindingstest.Run(t, L, `
				local fs, json = require("loom.fs"), require("loom.json")
				for i = 1, 10 do
					fs.with_lock("counter.lock", function()
						local n = fs.exists("counter") and tonumber(fs.read("counter")) or 0
						fs.write("counter", tostring(n + 1))
					end)
				end`)
		}()
	}
	wg.Wait()
	b, _ := os.ReadFile(filepath.Join(root, "counter"))
	if string(b) != "80" {
		t.Fatalf("lost updates under with_lock: counter = %s, want 80", b)
	}
}

func TestWithLockHonoursDeadlineAndReleasesOnError(t *testing.T) {
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, fs.New())
	err := L.DoString(`require("loom.fs").with_lock("l", function() error("inside") end)`)
	if err == nil || !strings.Contains(bindingstest.ErrorMessage(err), "inside") {
		t.Fatalf("error inside with_lock: %v", err)
	}
	// The lock was released: taking it again works at once.
	bindingstest.Run(t, L, `assert(require("loom.fs").with_lock("l", function() return 42 end) == 42)`)
	// Held by another holder, waiting ends at the hook's deadline.
	h2 := bindingstest.NewHost(t)
	h2.Work = h.Work
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	h2.Ctx = ctx
	L2 := bindingstest.NewState(t, h2, fs.New())
	var inner error
	L.SetGlobal("try_other", L.NewFunction(func(*lua.LState) int {
		inner = L2.DoString(`require("loom.fs").with_lock("l", function() end)`)
		return 0
	}))
	bindingstest.Run(t, L, `require("loom.fs").with_lock("l", function() try_other() end)`)
	if msg := bindingstest.ErrorMessage(inner); !strings.Contains(msg, "timeout: fs.with_lock l: gave up waiting for the lock") {
		t.Fatalf("a held lock must time out at the deadline: %v", inner)
	}
}
