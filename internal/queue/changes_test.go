package queue

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestInputKept: a queued task's input comes from its message; a failed
// or cancelled one keeps it in its record; a succeeded one keeps none.
func TestInputKept(t *testing.T) {
	q := open(t, testConfig(t))
	ctx := context.Background()
	// Queued, no daemon serves its type: read from the message.
	waiting := submit(t, q, task("in-wait", "nobody", `,"secret_field":"s-123456"`))
	in, err := q.Input(ctx, waiting.TaskID)
	if err != nil || !strings.Contains(string(in), "s-123456") {
		t.Fatalf("Input of a queued task = %s, %v", in, err)
	}
	if _, err := q.Cancel(ctx, waiting.TaskID); err != nil {
		t.Fatal(err)
	}
	if in, err := q.Input(ctx, waiting.TaskID); err != nil || !strings.Contains(string(in), `"taskId":"in-wait"`) {
		t.Fatalf("Input of a task cancelled while queued = %s, %v", in, err)
	}
	c := newCounter(func(_ context.Context, id string, _ int) ([]byte, int, error) {
		if strings.HasPrefix(id, "in-fail") {
			return []byte(`{"status":1,"message":"no"}`), 1, nil
		}
		return []byte(`{"status":0}`), 0, nil
	})
	serve(t, q, c, 2, shell)
	fail := submit(t, q, task("in-fail", "shell"))
	ok := submit(t, q, task("in-ok", "shell"))
	if got := wait(t, q, fail.TaskID); got.State != Failed || !strings.Contains(string(got.Input), `"taskId":"in-fail"`) {
		t.Fatalf("failed record: %s input %s", got.State, got.Input)
	}
	if got := wait(t, q, ok.TaskID); got.State != Succeeded || got.Input != nil {
		t.Fatalf("succeeded record: %s input %s, want none", got.State, got.Input)
	}
	if _, err := q.Input(ctx, ok.TaskID); !errors.Is(err, ErrNoInput) {
		t.Fatalf("Input of a succeeded task: %v, want ErrNoInput", err)
	}
	// A task larger than MaxKeptInput keeps none.
	big := submit(t, q, task("in-fail-big", "shell", `,"pad":"`+strings.Repeat("x", MaxKeptInput)+`"`))
	if got := wait(t, q, big.TaskID); got.State != Failed || got.Input != nil {
		t.Fatalf("big failed record: %s, %d bytes of input", got.State, len(got.Input))
	}
}

// TestOnChange: every record change reaches the callbacks, deletes too,
// until stop.
func TestOnChange(t *testing.T) {
	q := open(t, testConfig(t))
	var mu sync.Mutex
	seen := map[string][]string{}
	stop := q.OnChange(func(c Change) {
		mu.Lock()
		defer mu.Unlock()
		what := string(c.State)
		if c.Deleted {
			what = "deleted"
		}
		seen[c.TaskID] = append(seen[c.TaskID], what)
	})
	ctx := context.Background()
	submit(t, q, task("ch-1", "nobody"))
	if _, err := q.Cancel(ctx, "ch-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Delete(ctx, "ch-1"); err != nil {
		t.Fatal(err)
	}
	want := []string{"queued", "cancelled", "deleted"}
	end := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		got := strings.Join(seen["ch-1"], ",")
		mu.Unlock()
		if got == strings.Join(want, ",") {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("changes of ch-1: %s, want %v", got, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	submit(t, q, task("ch-2", "nobody"))
	time.Sleep(300 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(seen["ch-2"]) != 0 {
		t.Fatalf("a change after stop reached the callback: %v", seen["ch-2"])
	}
}
