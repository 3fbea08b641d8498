package childenv

import (
	"reflect"
	"testing"
)

func TestBuild(t *testing.T) {
	parent := []string{"PATH=/bin", "HOME=/h", "OPENAI_API_KEY=sk-x", "TINKER_API_KEY=t", "VIRTUAL_ENV=/v", "MINE=1", "LEVEL=easy", "BROKEN"}
	got := Build(parent, []string{"MINE", "ABSENT"}, map[string]string{"LEVEL": "hard", "NEW": "x"})
	want := []string{"HOME=/h", "LEVEL=hard", "MINE=1", "NEW=x", "PATH=/bin", "VIRTUAL_ENV=/v"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestCheckName(t *testing.T) {
	for name, ok := range map[string]bool{"A_1": true, "_x": true, "1A": false, "A=B": false, "": false, "A B": false} {
		if (CheckName(name) == nil) != ok {
			t.Errorf("%q: ok %v", name, !ok)
		}
	}
}
