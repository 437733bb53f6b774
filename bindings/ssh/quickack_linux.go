package ssh

import (
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// quickAck makes the TCP connection to an SSH server acknowledge every
// segment at once. sshd turns Nagle's algorithm off only for sessions
// with a terminal, so on an exec session a reply it sends while its
// previous small packet is still unacknowledged waits for our delayed
// ACK (40 ms on Linux): after a login, the first session's channel
// confirmation waited that long behind the server's hostkeys message,
// doubling the cost of a login. Linux leaves quick-ACK mode on its own,
// so it is set again after every read.
func quickAck(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	q := &quickAckConn{TCPConn: tc, rc: rc}
	q.set()
	return q
}

type quickAckConn struct {
	*net.TCPConn
	rc syscall.RawConn
}

func (c *quickAckConn) Read(p []byte) (int, error) {
	n, err := c.TCPConn.Read(p)
	if n > 0 {
		c.set()
	}
	return n, err
}

func (c *quickAckConn) set() {
	_ = c.rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_QUICKACK, 1)
	})
}
