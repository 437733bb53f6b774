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
