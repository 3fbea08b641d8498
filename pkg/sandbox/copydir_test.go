package sandbox

import (
	"archive/tar"
	"bytes"
	"io"
	"strings"
	"testing"
)

type entry struct {
	name string
	flag byte
	mode int64
	link string
	data string
}

func tarOf(t testing.TB, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := &tar.Header{Name: e.name, Typeflag: e.flag, Mode: e.mode, Linkname: e.link, Size: int64(len(e.data)), Uid: 10001, Gid: 10001,
			PAXRecords: map[string]string{"SCHILY.xattr.security.capability": "x"}}
		if e.flag != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.flag == tar.TypeReg {
			tw.Write([]byte(e.data))
		}
	}
	tw.Close()
	return buf.Bytes()
}

// TestCleanTree: what a directory copied from an agent's container into
// a verifier's may hold, and what is refused or dropped.
func TestCleanTree(t *testing.T) {
	dir := entry{name: "app/", flag: tar.TypeDir, mode: 0o755}
	cases := []struct {
		name    string
		entries []entry
		err     string // "" for a copy
		check   func(t *testing.T, hs []*tar.Header)
	}{
		{"files, modes and owners kept, setuid and setgid dropped", []entry{dir,
			{name: "app/run.sh", flag: tar.TypeReg, mode: 0o755, data: "#!/bin/sh\n"},
			{name: "app/sh", flag: tar.TypeReg, mode: 0o4755, data: "ELF"},
			{name: "app/g", flag: tar.TypeDir, mode: 0o2775}}, "",
			func(t *testing.T, hs []*tar.Header) {
				if hs[1].Mode != 0o755 || hs[2].Mode != 0o755 || hs[3].Mode != 0o775 || hs[2].Uid != 10001 {
					t.Errorf("modes %o %o %o uid %d", hs[1].Mode, hs[2].Mode, hs[3].Mode, hs[2].Uid)
				}
				for _, h := range hs {
					if len(h.PAXRecords) != 0 || len(h.Xattrs) != 0 {
						t.Errorf("%s keeps extended attributes %v", h.Name, h.PAXRecords)
					}
				}
			}},
		{"a symbolic link to /logs kept as a link", []entry{dir, {name: "app/logs", flag: tar.TypeSymlink, link: "/logs"}}, "",
			func(t *testing.T, hs []*tar.Header) {
				if hs[1].Typeflag != tar.TypeSymlink || hs[1].Linkname != "/logs" {
					t.Errorf("%+v", hs[1])
				}
			}},
		{"an entry beneath a symbolic link", []entry{dir, {name: "app/logs", flag: tar.TypeSymlink, link: "/logs"},
			{name: "app/logs/verifier/reward.txt", flag: tar.TypeReg, mode: 0o644, data: "1"}}, "beneath a link", nil},
		{"a hard link to a file copied before", []entry{dir, {name: "app/a", flag: tar.TypeReg, mode: 0o644, data: "x"},
			{name: "app/b", flag: tar.TypeLink, link: "app/a"}}, "", nil},
		{"a hard link out of the directory", []entry{dir, {name: "app/t", flag: tar.TypeLink, link: "tests/test.sh"}}, "not to a file copied before it", nil},
		{"a hard link to a symbolic link", []entry{dir, {name: "app/l", flag: tar.TypeSymlink, link: "/logs"},
			{name: "app/h", flag: tar.TypeLink, link: "app/l"}}, "not to a file copied before it", nil},
		{"devices and FIFOs left out", []entry{dir, {name: "app/fifo", flag: tar.TypeFifo}, {name: "app/null", flag: tar.TypeChar}}, "",
			func(t *testing.T, hs []*tar.Header) {
				if len(hs) != 1 {
					t.Errorf("%d entries", len(hs))
				}
			}},
		{"a name outside the directory", []entry{dir, {name: "app/../logs/verifier/reward.txt", flag: tar.TypeReg, data: "1"}}, "outside", nil},
		{"an absolute name", []entry{dir, {name: "/logs/x", flag: tar.TypeReg, data: "1"}}, "outside", nil},
		{"another directory", []entry{dir, {name: "etc/passwd", flag: tar.TypeReg, data: "1"}}, "outside", nil},
		{"a file where the directory was", []entry{{name: "app", flag: tar.TypeSymlink, link: "/logs"}}, "does not start with the directory", nil},
		{"twice the same name", []entry{dir, {name: "app/a", flag: tar.TypeSymlink, link: "/logs"}, {name: "app/a", flag: tar.TypeDir}}, "twice", nil},
		{"a file before its directory", []entry{dir, {name: "app/d/f", flag: tar.TypeReg, data: "1"}}, "before its directory", nil},
		{"more than the bytes allowed", []entry{dir, {name: "app/big", flag: tar.TypeReg, data: strings.Repeat("x", 2000)}}, "more than 1000 bytes", nil},
		{"empty", nil, "empty", nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			err := cleanTree(bytes.NewReader(tarOf(t, tc.entries...)), &out, "app", 1000)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var hs []*tar.Header
			tr := tar.NewReader(&out)
			for {
				h, err := tr.Next()
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				hs = append(hs, h)
			}
			if tc.check != nil {
				tc.check(t, hs)
			}
		})
	}
}

// FuzzCleanTree: whatever archive a container's directory gives, the
// cleaned copy holds nothing outside the directory, nothing beneath a
// link and no setuid bit, or is an error; it never panics.
func FuzzCleanTree(f *testing.F) {
	f.Add(tarOf(f, entry{name: "app/", flag: tar.TypeDir, mode: 0o755}, entry{name: "app/x", flag: tar.TypeReg, mode: 0o4755, data: "x"}))
	f.Add(tarOf(f, entry{name: "app/", flag: tar.TypeDir}, entry{name: "app/l", flag: tar.TypeSymlink, link: "/logs"}, entry{name: "app/l/x", flag: tar.TypeReg}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var out bytes.Buffer
		if err := cleanTree(bytes.NewReader(b), &out, "app", 1<<20); err != nil {
			return
		}
		tr := tar.NewReader(&out)
		links := map[string]bool{}
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			if h.Name != "app" && h.Name != "app/" && !strings.HasPrefix(h.Name, "app/") || strings.Contains(h.Name, "..") || h.Mode&0o6000 != 0 {
				t.Fatalf("%q mode %o", h.Name, h.Mode)
			}
			for l := range links {
				if strings.HasPrefix(h.Name, l+"/") {
					t.Fatalf("%s beneath the link %s", h.Name, l)
				}
			}
			if h.Typeflag == tar.TypeSymlink {
				links[strings.TrimSuffix(h.Name, "/")] = true
			}
		}
	})
}
