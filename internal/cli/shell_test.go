package cli

import (
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// chunks is a reader that answers one chunk per Read.
type chunks struct{ parts []string }

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.parts) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.parts[0])
	if c.parts[0] = c.parts[0][n:]; c.parts[0] == "" {
		c.parts = c.parts[1:]
	}
	return n, nil
}

// TestDetachReader: Ctrl-P Ctrl-Q ends the input with errDetached, also
// when the two keys come in separate reads; a Ctrl-P followed by anything
// else, or at the end, is passed on; bytes before the keys arrive, bytes
// after them do not.
func TestDetachReader(t *testing.T) {
	for _, c := range []struct {
		parts    []string
		want     string
		detached bool
	}{
		{[]string{"ls\r", "\x10\x11", "rm -rf /\r"}, "ls\r", true},
		{[]string{"ab\x10", "\x11cd"}, "ab", true},
		{[]string{"a\x10b\x10\x10\x11c"}, "a\x10b\x10", true},
		{[]string{"vim\r\x10", "x\x11"}, "vim\r\x10x\x11", false},
		{[]string{"end\x10"}, "end\x10", false},
		{[]string{"\x11\x10"}, "\x11\x10", false},
	} {
		got, err := io.ReadAll(&detachReader{r: &chunks{parts: append([]string(nil), c.parts...)}})
		if string(got) != c.want || errors.Is(err, errDetached) != c.detached || (!c.detached && err != nil) {
			t.Errorf("%q: got %q, %v; want %q, detached %v", c.parts, got, err, c.want, c.detached)
		}
	}
	// One byte at a time, into a one-byte buffer.
	got, err := io.ReadAll(iotest.OneByteReader(&detachReader{r: iotest.OneByteReader(&chunks{parts: []string{"x\x10y\x10\x11z"}})}))
	if string(got) != "x\x10y" || !errors.Is(err, errDetached) {
		t.Errorf("byte by byte: %q, %v", got, err)
	}
}
