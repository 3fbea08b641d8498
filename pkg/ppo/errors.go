package ppo

import (
	"errors"
	"fmt"
	"math"

	"github.com/rllm-org/rllm-go/pkg/usererr"
)

// LengthError reports two inputs that must have the same length and do not.
type LengthError struct {
	Name      string // the input whose length is wrong
	Len       int
	OtherName string // the input it is checked against
	OtherLen  int
}

func (e *LengthError) Error() string {
	return fmt.Sprintf("ppo: %s has length %d but %s has length %d; they must match", e.Name, e.Len, e.OtherName, e.OtherLen)
}

// NonFiniteError reports a NaN or ±Inf in an input: a clear error instead of
// a NaN spreading silently into advantages or gradients.
type NonFiniteError struct {
	Name  string
	Index int
	Value float64
}

func (e *NonFiniteError) Error() string {
	return fmt.Sprintf("ppo: %s[%d] is %v; every value must be a finite number", e.Name, e.Index, e.Value)
}

// configError is a setting a user can fix (an unknown estimator name, a
// clip ratio out of range): rllm's one user error type, exit code 2,
// naming the key.
func configError(key, msg string) error { return &usererr.Error{Subject: key, Msg: msg} }

// parseName looks up s, a setting's value, in names (every spelling
// accepted, aliases included). Anything else is a config error on key:
// unknown what "s"; use choices.
func parseName[K ~string](names map[string]K, s, key, what, choices string) (K, error) {
	if k, ok := names[s]; ok {
		return k, nil
	}
	return "", configError(key, "unknown "+what+" \""+s+"\"; use "+choices)
}

// rekey names another key in a config error, for a setting checked by a
// helper that knows only the value.
func rekey(err error, key string) error {
	var ue *usererr.Error
	if errors.As(err, &ue) {
		return configError(key, ue.Msg)
	}
	return err
}

// InputError is an input that is malformed in a way other than its length
// (offsets that go backwards, a group id out of range).
type InputError struct {
	Name  string
	Index int
	Msg   string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("ppo: %s[%d]: %s", e.Name, e.Index, e.Msg)
}

func sameLen(name string, n int, other string, m int) error {
	if n != m {
		return &LengthError{Name: name, Len: n, OtherName: other, OtherLen: m}
	}
	return nil
}

// checkFinite scans xs for the first NaN or ±Inf. It is the slow path used
// after a fused check in a hot loop said something is wrong, and the direct
// check for small per-sequence inputs.
func checkFinite(name string, xs []float64) error {
	for i, x := range xs {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return &NonFiniteError{Name: name, Index: i, Value: x}
		}
	}
	return nil
}

func zero(xs []float64) {
	clear(xs)
}
