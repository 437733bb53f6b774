package queue

import (
	"context"
	"testing"

	"github.com/loomrt/loom/runtime"
)

// TestParsedTask: the task a context carries is handed out for the same
// bytes only; other bytes (a copy, another task) are parsed, and their
// errors reported.
func TestParsedTask(t *testing.T) {
	data := []byte(`{"taskId":"t-1","taskName":"CREATE","config":{"provider":{"providertype":"p"}}}`)
	task, err := runtime.ParseTask(data)
	if err != nil {
		t.Fatal(err)
	}
	ctx := WithParsedTask(context.Background(), data, task)
	if got, err := ParsedTask(ctx, data); err != nil || got != task {
		t.Fatalf("same bytes: %p %v, want %p", got, err, task)
	}
	cp := append([]byte(nil), data...)
	if got, err := ParsedTask(ctx, cp); err != nil || got == task || got.TaskID != "t-1" {
		t.Fatalf("a copy: %+v %v", got, err)
	}
	if _, err := ParsedTask(ctx, []byte(`{"taskId":`)); err == nil {
		t.Fatal("a broken task parsed")
	}
	if _, err := ParsedTask(ctx, nil); err == nil {
		t.Fatal("no task parsed")
	}
}
