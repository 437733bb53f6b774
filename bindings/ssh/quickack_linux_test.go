package ssh

import (
	"context"
	"io"
	"net"
	"testing"

	"golang.org/x/sys/unix"
)

// TestQuickAck: a connection dialled to an SSH server acknowledges at
// once after every read, however request/response-like the exchange
// got (Linux's delayed-ACK "pingpong" mode, which it enters after a few
// such exchanges, would otherwise hold sshd's next reply behind Nagle).
func TestQuickAck(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c) // echo
	}()
	c, err := Options{}.dialTCP(context.Background(), 0, ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	q, ok := c.(*quickAckConn)
	if !ok {
		t.Fatalf("dialTCP returned %T, want the quick-ACK connection", c)
	}
	buf := make([]byte, 16)
	for i := range 20 {
		if _, err := c.Write([]byte("ping")); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf[:4]); err != nil {
			t.Fatal(err)
		}
		var on int
		_ = q.rc.Control(func(fd uintptr) { on, err = unix.GetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK) })
		if err != nil {
			t.Fatal(err)
		}
		if on != 1 {
			t.Fatalf("after exchange %d TCP_QUICKACK is %d, want 1", i, on)
		}
	}
}
