package process

import (
	"unicode/utf8"
)

// OutputBuffer keeps the first max bytes written to it and counts the rest, so
// the pipe it drains never fills up and blocks the child. over, when set,
// is called (once per buffer) when the first byte past max arrives. Every
// runner captures a program's stdout and stderr in one; it is read (Text)
// only after the goroutine writing it has finished.
type OutputBuffer struct {
	buf   []byte
	max   int
	total int64
	over  func()
}

// NewOutputBuffer keeps at most max bytes.
func NewOutputBuffer(max int) *OutputBuffer {
	return &OutputBuffer{max: max, buf: make([]byte, 0, min(max, 64<<10))}
}

// Write never fails: bytes past the cap are counted and discarded.
func (c *OutputBuffer) Write(p []byte) (int, error) {
	was := c.total
	c.total += int64(len(p))
	if c.over != nil && was <= int64(c.max) && c.total > int64(c.max) {
		c.over()
	}
	if room := c.max - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Text returns the captured bytes as valid UTF-8 of at most max bytes and
// whether anything was lost to the cap.
func (c *OutputBuffer) Text() (string, bool) {
	return toUTF8(c.buf, c.max, c.total > int64(len(c.buf)))
}

// toUTF8 converts b to valid UTF-8, replacing every invalid byte with U+FFFD,
// and cuts the result on a rune boundary so it never exceeds max bytes.
// truncated says b is a prefix of a longer stream: a rune split by the cut is
// then dropped rather than turned into replacement characters.
func toUTF8(b []byte, max int, truncated bool) (string, bool) {
	if truncated {
		b = dropPartialRune(b)
	}
	if utf8.Valid(b) && len(b) <= max {
		return string(b), truncated
	}
	out := make([]byte, 0, min(len(b)+len(b)/8, max+utf8.UTFMax))
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		var piece []byte
		if r == utf8.RuneError && size == 1 {
			piece = []byte(string(utf8.RuneError))
		} else {
			piece = b[i : i+size]
		}
		if len(out)+len(piece) > max {
			return string(out), true
		}
		out = append(out, piece...)
		i += size
	}
	return string(out), truncated
}

// dropPartialRune removes an incomplete UTF-8 sequence at the end of b.
func dropPartialRune(b []byte) []byte {
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				return b[:i]
			}
			return b
		}
	}
	return b
}
