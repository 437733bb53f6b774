package json_test

import (
	"strings"
	"testing"

	"github.com/loomrt/loom/bindings/bindingstest"
	jsonb "github.com/loomrt/loom/bindings/json"
)

func TestEncodeDecode(t *testing.T) {
	h := bindingstest.NewHost(t)
	L := bindingstest.NewState(t, h, jsonb.New())
	bindingstest.Run(t, L, `
		local json = require("loom.json")
		local s = json.encode({b = {1, 2}, a = "x", e = json.array()})
		assert(s == '{"a":"x","b":[1,2],"e":[]}', s)
		local v = json.decode('{"n": 1.5, "l": [true, "y"], "z": null}')
		assert(v.n == 1.5 and v.l[1] == true and v.l[2] == "y" and v.z == nil)
		assert(json.encode(json.decode("[]")) == "[]")
		assert(json.encode({x = 1}, {indent = "  "}) == '{\n  "x": 1\n}')
	`)
	for code, want := range map[string]string{
		`require("loom.json").decode("{bad")`:                        "config: json.decode: decoding JSON at line 1",
		`local t = {} t.t = t return require("loom.json").encode(t)`: "cycle",
		`require("loom.json").encode({f = print})`:                   "cannot encode a function",
	} {
		if msg := bindingstest.ErrorMessage(L.DoString(code)); !strings.Contains(msg, want) {
			t.Errorf("%s: got %q, want %q", code, msg, want)
		}
	}
}
