package ssh

import (
	"os/exec"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

func TestQuoteRoundTripsThroughSh(t *testing.T) {
	for _, s := range []string{"", "plain", "it's", "a b", "$HOME", "`x`", "\"q\"", "new\nline", "semi;colon", "--flag=1", "'''"} {
		out, err := exec.Command("sh", "-c", "printf %s "+Quote(s)).Output()
		if err != nil || string(out) != s {
			t.Fatalf("Quote(%q) = %s: sh printed %q (%v)", s, Quote(s), out, err)
		}
	}
	if Quote("safe/path-1.2") != "safe/path-1.2" {
		t.Fatal("safe words stay unquoted")
	}
}

func TestParseSizeAndDuration(t *testing.T) {
	for in, want := range map[string]int64{"4MiB": 4 << 20, "64MB": 64e6, "1k": 1024, "100": 100, "1.5 KiB": 1536} {
		if got, err := parseSize(lua.LString(in)); err != nil || got != want {
			t.Fatalf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	if _, err := parseSize(lua.LString("4 parsecs")); err == nil {
		t.Fatal("unknown unit accepted")
	}
	for in, want := range map[lua.LValue]time.Duration{lua.LString("1m30s"): 90 * time.Second, lua.LNumber(1.5): 1500 * time.Millisecond, lua.LString("2"): 2 * time.Second} {
		if got, err := parseDuration(in); err != nil || got != want {
			t.Fatalf("parseDuration(%v) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseDuration(lua.LString("-1s")); err == nil {
		t.Fatal("negative duration accepted")
	}
}
