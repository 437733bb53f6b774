package ssh

import (
	"context"
	"encoding/base64"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	lua "github.com/yuin/gopher-lua"
	"golang.org/x/crypto/ssh"

	"github.com/loomrt/loom/bindings"
)

// scanTypes are the key families keyscan asks for, one handshake each.
var scanTypes = []struct {
	name  string
	algos []string
}{
	{"ed25519", []string{ssh.KeyAlgoED25519}},
	{"ecdsa", []string{ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521}},
	{"rsa", []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256}},
}

var errScanned = errors.New("keyscan: got the key")

// keyscan is ssh.keyscan{host=, port=, timeout=}: the host keys a server
// presents, as {ed25519=, ecdsa=, rsa=} base64 blobs (the third field of a
// known_hosts line, the format of Coopr's config.ssh_host_keys).
//
// This is trust on first use by nature: call it where the provider can
// vouch for the host (right after creating it), then pin the result.
func (m *module) keyscan(L *lua.LState) int {
	t, ok := L.Get(1).(*lua.LTable)
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "ssh.keyscan: want a table {host=..., port=..., timeout=...}"))
	}
	f := newFields(t, "ssh.keyscan")
	host := f.str("host")
	port := f.integer("port", 22)
	timeout := f.duration("timeout", 10*time.Second)
	if err := f.done(); err != nil {
		bindings.Raise(L, err)
	}
	if host == "" {
		bindings.Raise(L, bindings.Errorf("config", "ssh.keyscan: host is required"))
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	ctx, cancel := context.WithTimeout(m.h.Context(), timeout)
	defer cancel()
	keys, err := m.b.pool.scan(ctx, addr)
	if err != nil {
		kind, msg := "connect", err.Error()
		if ctx.Err() != nil {
			kind, msg = "timeout", "timed out after "+timeout.String()
		}
		e := bindings.Errorf(kind, "ssh.keyscan %s: %s", addr, msg)
		e.Fields = map[string]any{"host": host, "port": port}
		bindings.Raise(L, e)
	}
	L.Push(hostKeysTable(L, keys))
	return 1
}

// scan reads every key type addr presents, one handshake per type in
// parallel, as {type: base64 blob}. With no key at all it returns the
// first handshake's error ("no host key found" when none failed).
func (p *pool) scan(ctx context.Context, addr string) (map[string]string, error) {
	keys := make([]ssh.PublicKey, len(scanTypes))
	errs := make([]error, len(scanTypes))
	var wg sync.WaitGroup
	for i, st := range scanTypes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			keys[i], errs[i] = p.scanOne(ctx, addr, st.algos)
		}()
	}
	wg.Wait()
	out := map[string]string{}
	for i, st := range scanTypes {
		if keys[i] != nil {
			out[st.name] = base64.StdEncoding.EncodeToString(keys[i].Marshal())
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return nil, errors.New("no host key found")
}

// hostKeysTable is keys as the Lua table ssh.HostKeys.
func hostKeysTable(L *lua.LState, keys map[string]string) *lua.LTable {
	t := L.CreateTable(0, len(keys))
	for typ, blob := range keys {
		t.RawSetString(typ, lua.LString(blob))
	}
	return t
}

// scanOne does a handshake offering only algos and stops it as soon as
// the server shows its key. It returns nil, nil when the server has no
// key of that type.
func (p *pool) scanOne(ctx context.Context, addr string, algos []string) (ssh.PublicKey, error) {
	var lastErr error
	for attempt := 0; attempt <= p.opts.DialRetries; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(p.opts.RetryBase << (attempt - 1)):
			case <-ctx.Done():
				return nil, lastErr
			}
		}
		release, err := p.handshakeSlot(ctx, addr)
		if err != nil {
			return nil, err
		}
		conn, err := p.opts.dialTCP(ctx, 0, addr)
		if err != nil {
			release()
			return nil, err
		}
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		var got ssh.PublicKey
		_, _, _, err = ssh.NewClientConn(conn, addr, &ssh.ClientConfig{
			User:              "loom-keyscan",
			HostKeyAlgorithms: algos,
			HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error {
				got = k
				return errScanned
			},
		})
		stop()
		conn.Close()
		release()
		switch {
		case got != nil:
			return got, nil
		case err != nil && strings.Contains(err.Error(), "no common algorithm for host key"):
			return nil, nil
		case err != nil && (strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset")):
			lastErr = err
			continue
		default:
			return nil, err
		}
	}
	return nil, lastErr
}
