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

// A crash at any point of Dir.Commit leaves a state CleanTemp turns into
// the old directory or the new one, never neither (before, a crash
// between the two renames left both under temporary names and CleanTemp
// deleted both).
func TestDirCommitCrashRecovers(t *testing.T) {
	for _, point := range []string{"new", "old", "renamed"} {
		t.Run(point, func(t *testing.T) {
			root := t.TempDir()
			target := filepath.Join(root, "global_step_3")
			writeDir := func(content string) *Dir {
				d, err := CreateDir(target)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(d.TempPath(), "f"), []byte(content), FileMode); err != nil {
					t.Fatal(err)
				}
				return d
			}
			if err := writeDir("old").Commit(); err != nil {
				t.Fatal(err)
			}
			crashAt = func(p string) bool { return p == point }
			err := writeDir("new").Commit()
			crashAt = func(string) bool { return false }
			if !errors.Is(err, errCrash) {
				t.Fatalf("commit: %v, want the simulated crash", err)
			}
			if _, err := CleanTemp(root); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(target, "f"))
			if err != nil || string(b) != "new" {
				t.Fatalf("after recovery: %q %v, want the new directory", b, err)
			}
			entries, _ := os.ReadDir(root)
			if len(entries) != 1 {
				var names []string
				for _, e := range entries {
					names = append(names, e.Name())
				}
				t.Fatalf("left behind: %v", names)
			}
		})
	}
}

// The state the old Commit left when killed between its renames (the old
// directory moved aside, the new one not yet in place) is rolled back.
func TestCleanTempRestoresOld(t *testing.T) {
	root := t.TempDir()
	target := filepath.Join(root, "global_step_3")
	_, old := commitPaths(target)
	if err := os.MkdirAll(old, DirMode); err != nil {
		t.Fatal(err)
	}
	if _, err := CleanTemp(root); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatalf("the old directory was not put back: %v", err)
	}
}

// A secret replaces a world-readable file and ends up 0600.
func TestWriteSecretIsOwnerOnly(t *testing.T) {
	p := filepath.Join(t.TempDir(), "key")
	if err := WriteFile(p, []byte("old")); err != nil {
		t.Fatal(err)
	}
	if err := WriteSecret(p, []byte("s3cret")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if string(b) != "s3cret" || st.Mode().Perm() != SecretMode {
		t.Fatalf("%q mode %v", b, st.Mode().Perm())
	}
	assertNoTemp(t, filepath.Dir(p))
}

func TestMoves(t *testing.T) {
	for _, tc := range []struct {
		name string
		move func(from, path string) error
	}{
		{"Move", Move},
		{"MoveUnsynced", MoveUnsynced},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			from, p := filepath.Join(dir, "blob.incomplete"), filepath.Join(dir, "blob")
			for _, content := range []string{"old", "new"} {
				if err := os.WriteFile(from, []byte(content), FileMode); err != nil {
					t.Fatal(err)
				}
				if err := tc.move(from, p); err != nil {
					t.Fatal(err)
				}
				if b, _ := os.ReadFile(p); string(b) != content {
					t.Fatalf("got %q, want %q", b, content)
				}
				if _, err := os.Stat(from); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("%s still there: %v", from, err)
				}
			}
			if err := tc.move(from, p); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("moving a file that is gone: %v", err)
			}
		})
	}
}

// What Move's fsyncs cost for a freshly written 100 MB file (a Hub
// download's blob), against the rename alone: only the move is timed.
func BenchmarkMove100MB(b *testing.B) {
	data := make([]byte, 100<<20)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, tc := range []struct {
		name string
		move func(from, path string) error
	}{
		{"Move", Move},
		{"MoveUnsynced", MoveUnsynced},
	} {
		b.Run(tc.name, func(b *testing.B) {
			dir := b.TempDir()
			from, p := filepath.Join(dir, "blob.incomplete"), filepath.Join(dir, "blob")
			b.SetBytes(int64(len(data)))
			for range b.N {
				b.StopTimer()
				os.Remove(p)
				if err := os.WriteFile(from, data, FileMode); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := tc.move(from, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
