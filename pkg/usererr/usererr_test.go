package usererr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"
)

func TestErrorText(t *testing.T) {
	cases := []struct {
		err  *Error
		want string
	}{
		{&Error{Msg: "bad"}, "bad"},
		{&Error{Subject: "data.train_batch_size", Msg: "must be > 0"}, "data.train_batch_size: must be > 0"},
		{&Error{Subject: "a.yaml:3", Msg: "unknown key x", Fix: "remove it"}, "a.yaml:3: unknown key x; remove it"},
	}
	for _, c := range cases {
		if got := c.err.Error(); got != c.want {
			t.Errorf("got %q, want %q", got, c.want)
		}
	}
}

func TestExitCode(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	cases := []struct {
		name string
		ctx  context.Context
		err  error
		want int
	}{
		{"nil", bg, nil, 0},
		{"plain", bg, errors.New("boom"), 1},
		{"usage", bg, Errorf("x: %d", 1), 2},
		{"wrapped usage", bg, fmt.Errorf("loading: %w", Errorf("bad")), 2},
		{"custom code", bg, &Error{Code: 3, Msg: "m"}, 3},
		{"interrupt", cancelled, fmt.Errorf("step 3: %w", context.Canceled), 130},
		{"canceled without interrupt", bg, context.Canceled, 1},
	}
	for _, c := range cases {
		if got := ExitCode(c.ctx, c.err); got != c.want {
			t.Errorf("%s: got %d, want %d", c.name, got, c.want)
		}
	}
}

func TestErrorfWrapsCause(t *testing.T) {
	err := Errorf("reading %s: %w", "f", fs.ErrNotExist)
	if !errors.Is(err, fs.ErrNotExist) || !Is(err) {
		t.Fatalf("%v lost its cause or its kind", err)
	}
	if Wrap(nil) != nil {
		t.Fatal("Wrap(nil) must be nil")
	}
	if w := Wrap(errors.New("x")); !Is(w) || w.Error() != "x" {
		t.Fatalf("Wrap changed %v", w)
	}
}
