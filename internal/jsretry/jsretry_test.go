package jsretry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func apiErr(code, errCode int, desc string) error {
	return fmt.Errorf("creating stream X: %w", &jetstream.APIError{Code: code, ErrorCode: jetstream.ErrorCode(errCode), Description: desc})
}

// The errors a NATS cluster answers while it cannot do a request now
// (the server's own words) are transient; configuration errors are not.
func TestTransient(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nats.ErrNoResponders, true},
		{fmt.Errorf("x: %w", context.DeadlineExceeded), true},
		{nats.ErrTimeout, true},
		{apiErr(503, 10008, "JetStream system temporarily unavailable"), true},
		{apiErr(500, 10009, "JetStream cluster can not handle request"), true},
		{apiErr(400, 10005, "no suitable peers for placement, peer offline"), true},
		{apiErr(503, 10023, "insufficient resources"), true},
		{apiErr(500, 10118, "stream is offline"), true},
		{jetstream.ErrJetStreamNotEnabled, true},                       // nats.go's word for no responders on a bucket
		{apiErr(400, 10005, "no suitable peers for placement"), false}, // more replicas than servers
		{apiErr(400, 10005, "no suitable peers for placement, tags not matched ['x']"), false},
		{jetstream.ErrJetStreamNotEnabledForAccount, false},
		{apiErr(400, 10065, "subjects overlap with an existing stream"), false},
		{jetstream.ErrStreamNameAlreadyInUse, false},
		{apiErr(500, 10052, "stream configuration update can not change retention"), false},
		{nats.ErrPermissionViolation, false},
		{nats.ErrAuthorization, false},
		{nats.ErrConnectionClosed, false},
		{errors.Join(apiErr(400, 10065, "subjects overlap"), nats.ErrNoResponders), true},
		{nats.ErrNoServers, true}, // connecting: nothing listens at the URL
		{&net.OpError{Op: "dial", Net: "tcp", Err: &net.DNSError{Err: "no such host", Name: "nats.invalid", IsNotFound: true}}, true},
		{&net.OpError{Op: "read", Net: "tcp", Err: errors.New("reset")}, false},
	} {
		if got := Transient(c.err); got != c.want {
			t.Errorf("Transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}

// Do stops at a permanent error, retries a transient one until it goes
// through, and gives up with the last error when the context ends; a nil
// Waiter tries once.
func TestDo(t *testing.T) {
	w := &Waiter{Min: time.Millisecond, Max: 2 * time.Millisecond}
	n := 0
	err := w.Do(context.Background(), "stream X", func(context.Context) error {
		n++
		if n < 3 {
			return nats.ErrNoResponders
		}
		return nil
	})
	if err != nil || n != 3 {
		t.Fatalf("transient twice, then through: %v after %d calls", err, n)
	}
	n = 0
	perm := apiErr(400, 10065, "subjects overlap")
	if err := w.Do(context.Background(), "stream X", func(context.Context) error { n++; return perm }); err != perm || n != 1 {
		t.Fatalf("permanent: %v after %d calls, want it as is after 1", err, n)
	}
	ctx, cancel := context.WithCancelCause(context.Background())
	n = 0
	err = w.Do(ctx, "stream X", func(context.Context) error {
		if n++; n == 5 {
			cancel(errors.New("SIGTERM during the start"))
		}
		return nats.ErrNoResponders
	})
	if !errors.Is(err, nats.ErrNoResponders) || !strings.Contains(err.Error(), "SIGTERM during the start") || n != 5 {
		t.Fatalf("until the context ended: %v after %d calls", err, n)
	}
	var none *Waiter
	n = 0
	if err := none.Do(context.Background(), "x", func(context.Context) error { n++; return nats.ErrNoResponders }); err != nats.ErrNoResponders || n != 1 {
		t.Fatalf("nil waiter: %v after %d calls", err, n)
	}
}
