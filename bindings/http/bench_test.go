package http_test

import (
	"encoding/json"
	"io"
	nethttp "net/http"
	"net/http/httptest"
	"strings"
	"testing"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings/bindingstest"
	loomhttp "github.com/loomrt/loom/bindings/http"
)

// benchBody is a small JSON document, about the size of one droplet.
var benchBody = `{"droplet":{"id":3164444,"name":"web-1","status":"active","size_slug":"s-1vcpu-1gb",` +
	`"networks":{"v4":[{"ip_address":"10.128.0.2","type":"private"},{"ip_address":"203.0.113.7","type":"public"}]},` +
	`"tags":["loom","cluster-42","node-7"],"region":{"slug":"nyc3","name":"New York 3"}}}`

func benchServer(b *testing.B) *httptest.Server {
	srv := httptest.NewServer(nethttp.HandlerFunc(func(w nethttp.ResponseWriter, r *nethttp.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, benchBody)
	}))
	b.Cleanup(srv.Close)
	return srv
}

// BenchmarkGet compares a GET round trip to a loopback server through
// loom.http (Lua call, option parsing, logging, response table) with the
// same round trip through a plain net/http client. Both reuse one
// keep-alive connection.
func BenchmarkGet(b *testing.B) {
	srv := benchServer(b)

	b.Run("nethttp", func(b *testing.B) {
		client := &nethttp.Client{Transport: nethttp.DefaultTransport.(*nethttp.Transport).Clone()}
		defer client.CloseIdleConnections()
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.Get(srv.URL + "/v2/droplets/1")
			if err != nil {
				b.Fatal(err)
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil || resp.StatusCode != 200 || len(data) != len(benchBody) {
				b.Fatalf("bad response %d %v", resp.StatusCode, err)
			}
		}
	})
	b.Run("binding", func(b *testing.B) {
		fn := benchLua(b, srv.URL, `return function(url) return http.get(url).status end`)
		b.ReportAllocs()
		for b.Loop() {
			fn()
		}
	})
	b.Run("nethttp_json", func(b *testing.B) {
		client := &nethttp.Client{Transport: nethttp.DefaultTransport.(*nethttp.Transport).Clone()}
		defer client.CloseIdleConnections()
		b.ReportAllocs()
		for b.Loop() {
			resp, err := client.Get(srv.URL + "/v2/droplets/1")
			if err != nil {
				b.Fatal(err)
			}
			var v map[string]any
			err = json.NewDecoder(resp.Body).Decode(&v)
			resp.Body.Close()
			if err != nil || v["droplet"] == nil {
				b.Fatalf("bad response: %v", err)
			}
		}
	})
	b.Run("binding_json", func(b *testing.B) {
		fn := benchLua(b, srv.URL, `return function(url) return http.get(url):json().droplet.status end`)
		b.ReportAllocs()
		for b.Loop() {
			fn()
		}
	})
}

// benchLua compiles a Lua function taking the URL and returns a Go func
// calling it once and checking it returned something.
func benchLua(b *testing.B, base, code string) func() {
	bind := loomhttp.New(loomhttp.Options{})
	b.Cleanup(func() { bind.Close() })
	h := bindingstest.NewHost(b)
	L := bindingstest.NewState(b, h, bind)
	bindingstest.Run(b, L, `http = require("loom.http")`)
	if err := L.DoString(code); err != nil {
		b.Fatal(err)
	}
	fn := L.Get(-1).(*lua.LFunction)
	L.Pop(1)
	url := lua.LString(base + "/v2/droplets/1")
	return func() {
		if err := L.CallByParam(lua.P{Fn: fn, NRet: 1, Protect: true}, url); err != nil {
			b.Fatal(err)
		}
		if v := L.Get(-1); v == lua.LNil || strings.Contains(v.String(), "error") {
			b.Fatalf("bad result %v", v)
		}
		L.Pop(1)
	}
}
