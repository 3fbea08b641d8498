package hub

import (
	"flag"
	"os"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the catalog table in docs/datasets.md")

// docs/datasets.md carries the catalog as a table; it must not drift
// from catalog.json.
func TestDocsTable(t *testing.T) {
	const path = "../../docs/datasets.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, TableBegin), strings.Index(doc, TableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the catalog table markers", path)
	}
	want := doc[:i+len(TableBegin)] + "\n" + Builtin().Table() + doc[j:]
	if want == doc {
		return
	}
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("%s's catalog table differs from catalog.json; run go test ./pkg/hub -run TestDocsTable -update", path)
}
