package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesWhole(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "a.txt")
	if err := WriteFile(p, []byte("one")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(p, []byte("two")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != "two" {
		t.Fatalf("got %q", b)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != FileMode {
		t.Fatalf("mode %v, want %v", st.Mode().Perm(), FileMode)
	}
	assertNoTemp(t, filepath.Dir(p))
}

func TestWriteFailureLeavesTarget(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.txt")
	WriteFile(p, []byte("keep"))
	boom := errors.New("boom")
	err := Write(p, func(w io.Writer) error {
		w.Write([]byte("partial"))
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v", err)
	}
	b, _ := os.ReadFile(p)
	if string(b) != "keep" {
		t.Fatalf("target changed to %q", b)
	}
	assertNoTemp(t, dir)
}

func TestDirCommitReplaces(t *testing.T) {
	root := t.TempDir()
	p := filepath.Join(root, "global_step_1")
	for _, content := range []string{"old", "new"} {
		d, err := CreateDir(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d.TempPath(), "f"), []byte(content), FileMode); err != nil {
			t.Fatal(err)
		}
		if err := d.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := os.ReadFile(filepath.Join(p, "f"))
	if string(b) != "new" {
		t.Fatalf("got %q", b)
	}
	assertNoTemp(t, root)
	d, _ := CreateDir(filepath.Join(root, "x"))
	d.Abort()
	assertNoTemp(t, root)
}

func TestCleanTemp(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, TempPrefix+"a"), nil, FileMode)
	os.Mkdir(filepath.Join(root, TempPrefix+"d"), DirMode)
	os.WriteFile(filepath.Join(root, "keep"), nil, FileMode)
	n, err := CleanTemp(root)
	if err != nil || n != 2 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	assertNoTemp(t, root)
	if _, err := os.Stat(filepath.Join(root, "keep")); err != nil {
		t.Fatal(err)
	}
}

func assertNoTemp(t *testing.T, dir string) {
	t.Helper()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if len(e.Name()) >= len(TempPrefix) && e.Name()[:len(TempPrefix)] == TempPrefix {
			t.Errorf("leftover temporary %s", e.Name())
		}
	}
}
