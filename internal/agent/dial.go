package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"

	"golang.org/x/sys/unix"
)

// ErrNotSocket is returned when the agent's socket path holds something
// other than a socket: a link or a file that code in the sandbox put there
// (the socket's directory is writable from inside the sandbox). It is
// never followed.
var ErrNotSocket = errors.New("the agent's socket was replaced by something that is not a socket")

// dial connects to the agent's socket without following a link: the path
// is opened O_PATH|O_NOFOLLOW, checked to be a socket with fstat, and
// connected to through the fd's /proc/self/fd magic link, which names that
// very inode, within DialTimeout. Errors: the open's (ENOENT when missing), ErrNotSocket, or
// the connect's (ECONNREFUSED when no one listens).
func (cl *Client) dial(ctx context.Context) (net.Conn, error) {
	fd, err := unix.Open(cl.sock, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: fmt.Errorf("open %s: %w", cl.sock, err)}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		return nil, ErrNotSocket
	}
	d := net.Dialer{Timeout: DialTimeout}
	return d.DialContext(ctx, "unix", "/proc/self/fd/"+strconv.Itoa(fd))
}
