package process

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestToUTF8(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		max       int
		truncated bool
		want      string
		wantTrunc bool
	}{
		{name: "valid", in: "héllo", max: 100, want: "héllo"},
		{name: "each invalid byte replaced", in: "a\xff\xfeb", max: 100, want: "a\uFFFD\uFFFDb"},
		{name: "replacement growth cut on rune boundary", in: "\xff\xff\xff\xff", max: 10, want: "\uFFFD\uFFFD\uFFFD", wantTrunc: true},
		{name: "split rune at cap dropped", in: "ab\xe2\x82", max: 4, truncated: true, want: "ab", wantTrunc: true},
		{name: "complete rune at cap kept", in: "ab\xe2\x82\xac", max: 5, truncated: true, want: "ab€", wantTrunc: true},
		{name: "invalid tail of untruncated stream replaced", in: "ab\xe2\x82", max: 100, want: "ab\uFFFD\uFFFD"},
		{name: "valid but longer than max", in: "ééé", max: 5, want: "éé", wantTrunc: true},
		{name: "empty", in: "", max: 10, want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, trunc := toUTF8([]byte(tt.in), tt.max, tt.truncated)
			if got != tt.want || trunc != tt.wantTrunc {
				t.Errorf("toUTF8(%q, %d, %v) = %q, %v; want %q, %v", tt.in, tt.max, tt.truncated, got, trunc, tt.want, tt.wantTrunc)
			}
		})
	}
}

func TestCapBuffer(t *testing.T) {
	t.Parallel()
	b := NewOutputBuffer(10)
	for range 5 {
		if n, err := b.Write([]byte("abcd")); n != 4 || err != nil {
			t.Fatalf("Write = %d, %v; want 4, nil", n, err)
		}
	}
	got, trunc := b.Text()
	if got != "abcdabcdab" || !trunc || b.total != 20 {
		t.Errorf("text %q truncated %v total %d", got, trunc, b.total)
	}
}

func FuzzToUTF8(f *testing.F) {
	for _, s := range []string{"", "abc", "\xff", "a\xe2\x82", "€€€", strings.Repeat("\xf0\x9f\x98", 5)} {
		f.Add([]byte(s), 4, true)
	}
	f.Fuzz(func(t *testing.T, b []byte, max int, truncated bool) {
		if max < 0 || max > 1<<16 {
			return
		}
		got, _ := toUTF8(b, max, truncated)
		if len(got) > max || !utf8.ValidString(got) {
			t.Fatalf("toUTF8(%q, %d) = %q: over cap or invalid", b, max, got)
		}
	})
}
