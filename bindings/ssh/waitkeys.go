package ssh

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/loomrt/loom/bindings"
)

// waitHostKeys is ssh.wait_host_keys{host=, port=22, timeout=300,
// interval=5, attempt_timeout=10}: ssh.keyscan tried again every interval
// until sshd answers or the budget is spent: timeout, cut to end
// deadlineMargin before the hook's deadline. It returns the keys (ssh.HostKeys), or nil and a message
// saying what was waited for, how long and the last error: a new machine
// whose sshd never came up is a warning for the provider, not a failure
// of its hook. A cancelled task raises kind "cancelled" at once.
//
// Every attempt is keyscan's own scan, so it dials the way keyscan does
// (Options.Dial, EarlyDials, the per-host handshake bounds).
func (m *module) waitHostKeys(L *lua.LState) int {
	const where = "ssh.wait_host_keys"
	t, ok := L.Get(1).(*lua.LTable)
	if !ok {
		bindings.Raise(L, bindings.Errorf("config", "%s: want a table {host=..., port=..., timeout=..., interval=..., attempt_timeout=...}", where))
	}
	f := newFields(t, where)
	host := f.str("host")
	port := f.integer("port", 22)
	budget := f.duration("timeout", 5*time.Minute)
	interval := f.duration("interval", 5*time.Second)
	attemptTimeout := f.duration("attempt_timeout", 10*time.Second)
	if err := f.done(); err != nil {
		bindings.Raise(L, err)
	}
	switch {
	case host == "":
		bindings.Raise(L, bindings.Errorf("config", "%s: host is required", where))
	case port < 1 || port > 65535:
		bindings.Raise(L, bindings.Errorf("config", "%s: option \"port\": %d is not a TCP port (1-65535)", where, port))
	case interval <= 0:
		bindings.Raise(L, bindings.Errorf("config", "%s: option \"interval\": want a positive pause between attempts such as 5 or \"5s\"", where))
	case attemptTimeout <= 0:
		bindings.Raise(L, bindings.Errorf("config", "%s: option \"attempt_timeout\": want a positive time such as 10 or \"10s\"", where))
	}
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	keys, err := m.waitKeys(addr, budget, interval, attemptTimeout)
	var be *bindings.Error
	switch {
	case err == nil:
		L.Push(hostKeysTable(L, keys))
		return 1
	case errors.As(err, &be):
		be.Fields = map[string]any{"host": host, "port": port}
		bindings.Raise(L, be)
	}
	L.Push(lua.LNil)
	L.Push(lua.LString(m.h.Redact(err.Error())))
	return 2
}

// deadlineMargin is how long before the hook's deadline wait_host_keys
// gives up (at most half the time left), so the hook can still return.
const deadlineMargin = 5 * time.Second

// waitKeys scans addr until it answers with a key or the budget ends. A
// budget that ends returns a plain error; a cancelled hook a
// *bindings.Error of kind "cancelled".
func (m *module) waitKeys(addr string, budget, interval, attemptTimeout time.Duration) (map[string]string, error) {
	ctx := m.h.Context()
	clock := m.b.opts.Clock
	logger := m.h.Logger()
	start := clock.Now()
	end := start.Add(budget)
	cut := false // the budget ends before the hook's deadline, not at timeout
	var hardEnd time.Time
	if dl, ok := bindings.HookDeadline(ctx); ok {
		// Stop a margin before the deadline: a hook still running at its
		// deadline fails, and the caller wants to return with a warning.
		hardEnd = dl.Add(-max(min(deadlineMargin, dl.Sub(start)/2), 0))
		if hardEnd.Before(end) {
			end, cut = hardEnd, true
		}
	}
	var lastErr error
	attempts := 0
	for {
		left := end.Sub(clock.Now())
		if left <= 0 && attempts > 0 {
			break
		}
		at := attemptTimeout
		if left > 0 && left < at {
			at = left // never past the budget
		}
		if h := hardEnd.Sub(clock.Now()); !hardEnd.IsZero() && h > 0 && h < at {
			at = h // nor into the hook's last moments (timeout=0)
		}
		attempts++
		actx, cancel := context.WithTimeout(ctx, at)
		keys, err := m.b.pool.scan(actx, addr)
		attemptEnded := actx.Err() != nil
		cancel()
		if err == nil {
			if attempts > 1 {
				logger.Debug("sshd answered", "addr", addr, "attempts", attempts, "waited", clock.Now().Sub(start).Round(time.Millisecond).String())
			}
			return keys, nil
		}
		if ctx.Err() != nil {
			// The hook ended the attempt: its error says nothing of sshd
			// unless no attempt before it failed.
			if lastErr == nil {
				lastErr = err
			}
			break
		}
		if attemptEnded {
			// The handshake's own error is then only "use of closed
			// network connection": say which phase hung instead.
			if strings.Contains(err.Error(), "ssh: handshake failed") {
				err = fmt.Errorf("the TCP connection opened but no host key came within %s (attempt_timeout)", at.Round(time.Millisecond))
			} else {
				err = fmt.Errorf("no answer within %s (attempt_timeout): %w", at.Round(time.Millisecond), err)
			}
		}
		lastErr = err
		logger.Debug("sshd is not answering yet", "addr", addr, "attempt", attempts, "error", err.Error())
		left = end.Sub(clock.Now())
		if left <= 0 {
			break
		}
		if clock.Sleep(ctx, min(interval, left)) != nil {
			break
		}
	}
	waited := clock.Now().Sub(start).Round(time.Millisecond)
	last := "none"
	if lastErr != nil {
		last = lastErr.Error()
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return nil, bindings.Errorf("cancelled", "ssh.wait_host_keys %s: the task was cancelled after %s of waiting for sshd (%s; last error: %s)",
			addr, waited, plural(attempts, "attempt"), last)
	}
	within := budget.String() + " (timeout)"
	if cut || ctx.Err() != nil {
		within = fmt.Sprintf("%s, cut short by the hook's deadline (timeout was %s)", waited, budget)
	}
	return nil, fmt.Errorf("ssh.wait_host_keys: sshd on %s gave no host key within %s: %s, last error: %s",
		addr, within, plural(attempts, "attempt"), last)
}

func plural(n int, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.Itoa(n) + " " + what + "s"
}
