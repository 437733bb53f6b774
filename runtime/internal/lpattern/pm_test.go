package lpattern

import (
	"strings"
	"testing"
)

func TestFindMatchesLikeGopherLua(t *testing.T) {
	ms, err := Find("(%w+)=(%w+)", []byte("a=1 b=2"), 0, -1, 1000, nil)
	if err != nil || len(ms) != 2 || ms[1].Capture(2) != 4 {
		t.Fatalf("%v %v", ms, err)
	}
}

func TestStepBudget(t *testing.T) {
	_, err := Find(strings.Repeat("a-", 3)+"b", []byte(strings.Repeat("a", 300)), 0, 1, 1_000_000, nil)
	if err == nil || !strings.Contains(err.Error(), "too complex") {
		t.Fatalf("want a budget error, got %v", err)
	}
	done := make(chan struct{})
	close(done)
	_, err = Find(strings.Repeat("a-", 3)+"b", []byte(strings.Repeat("a", 300)), 0, 1, 1<<40, done)
	if err == nil || !strings.Contains(err.Error(), "deadline") {
		t.Fatalf("want a deadline error, got %v", err)
	}
}
