// Package mirror holds, under the same import path suffixes, the parts of
// Koding's kloud (github.com/koding/koding at 74c20cb0, 2019-02-07, the
// archived repository's last commit) that the Lua provider adapter
// compiles against. koding/koding is a GOPATH-era tree without a go.mod;
// the Go module proxy does not serve it (`go list -m
// github.com/koding/koding@latest`: 403 "not available"), and its
// packages import each other as koding/..., so no module can require them.
//
// The mirror declares exactly the exported names the adapter and its
// test host use, with kloud's field names, types and method signatures;
// every declaration names the file it mirrors. Bodies are this project's
// own: behaviour a test depends on (template variables, Klient user data,
// credential descriptions) is reimplemented to kloud's documented
// semantics, everything else (MongoDB, the terraformer kite, Klient
// dialing) is left out and supplied by the test host (package kloudtest).
//
// Built inside a Koding tree with the build tag koding, the adapter
// compiles against the real packages instead and none of this is used
// (docs/kinds/kloud.md).
package mirror
