package log_test

import (
	"strings"
	"testing"

	"github.com/loomrt/loom/bindings/bindingstest"
	logb "github.com/loomrt/loom/bindings/log"
)

func TestLevelsFormatAndAttrs(t *testing.T) {
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, logb.New())
	bindingstest.Run(t, L, `
		local log = require("loom.log")
		log.debug("plain")
		log.info("created %s in %d ms", "web1", 42)
		log.warn("no verbs", "joined", 7)
		log.error("with attrs %s", "x", {region = "eu-1", tries = 3})
	`)
	logs := h.Logs()
	for _, want := range []string{
		`"level":"DEBUG","msg":"plain"`,
		`"msg":"created web1 in 42 ms"`,
		`"msg":"no verbs joined 7"`,
		`"level":"ERROR","msg":"with attrs x","region":"eu-1","tries":"3"`,
	} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %s:\n%s", want, logs)
		}
	}
}

// One call with a huge attribute table writes a bounded line and says how
// many attributes it dropped.
func TestAttributesAreCapped(t *testing.T) {
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, logb.New())
	bindingstest.Run(t, L, `
		local log = require("loom.log")
		local attrs = {}
		for i = 1, 20000 do attrs["k" .. i] = ("v"):rep(1000) end
		log.info("many", attrs)
	`)
	logs := h.Logs()
	if len(logs) > 200<<10 {
		t.Fatalf("one log call wrote %d bytes", len(logs))
	}
	if !strings.Contains(logs, `"attrs_dropped":`) {
		t.Fatalf("no attrs_dropped count in %.300s", logs)
	}
}
