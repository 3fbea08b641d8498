package program

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestApart: a program directory that holds the task, or lies inside it,
// is refused however the two paths are spelled: through a symbolic link
// to the directory that holds the task (the daemon binds the link's
// target), a link to the task, or a relative path.
func TestApart(t *testing.T) {
	root := t.TempDir()
	data := filepath.Join(root, "data")
	task := filepath.Join(data, "task")
	other := filepath.Join(root, "other")
	for _, d := range []string{filepath.Join(task, "tests"), other} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := func(name, target string) string {
		p := filepath.Join(root, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		return p
	}
	toData := link("prog", data)
	toTask := link("tasklink", task)
	toOther := link("otherlink", other)
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	relData, err := filepath.Rel(wd, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, dir, task, refused string
	}{
		{"apart", other, task, ""},
		{"apart through links", toOther, toTask, ""},
		{"holds the task", data, task, "holds the task"},
		{"a link to the directory that holds the task", toData, task, "holds the task"},
		{"the task through a link", data, toTask, "holds the task"},
		{"the task itself through a link", toTask, task, "holds the task"},
		{"a relative path", relData, task, "holds the task"},
		{"inside the task", filepath.Join(task, "tests"), task, "is inside the task"},
		{"inside the task through a link", filepath.Join(toData, "task", "tests"), toTask, "is inside the task"},
	} {
		err := apart(tc.dir, tc.task)
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%s: refused: %v", tc.name, err)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), "workflow.args.dir")):
			t.Errorf("%s: got %v, want an error saying %q", tc.name, err, tc.refused)
		}
	}
}
