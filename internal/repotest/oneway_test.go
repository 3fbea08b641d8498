package repotest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// One way to do each thing, checked over every non-test Go file of the
// module: only pkg/usererr's error type carries an exit code (an
// ExitCode method), and only internal/atomicfile renames files.
func TestOneWay(t *testing.T) {
	root := Root(t)
	var exitCoders, renamers []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		dir := filepath.ToSlash(filepath.Dir(rel))
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.FuncDecl:
				if n.Recv != nil && n.Name.Name == "ExitCode" && !slices.Contains(exitCoders, dir) {
					exitCoders = append(exitCoders, dir)
				}
			case *ast.SelectorExpr:
				if x, ok := n.X.(*ast.Ident); ok && x.Name == "os" && n.Sel.Name == "Rename" && !slices.Contains(renamers, dir) {
					renamers = append(renamers, dir)
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(exitCoders, []string{"pkg/usererr"}) {
		t.Errorf("packages whose errors carry exit codes: %v; only pkg/usererr's Error should (wrap others in it)", exitCoders)
	}
	if !slices.Equal(renamers, []string{"internal/atomicfile"}) {
		t.Errorf("packages calling os.Rename: %v; only internal/atomicfile should", renamers)
	}
}
