package code

import (
	"fmt"
	"math/rand/v2"
	"regexp"
)

// reCalled finds a name the question writes as a call ("Write add(a, b).").
var reCalled = regexp.MustCompile(`\b([A-Za-z_][A-Za-z0-9_]*)\(`)

// FormatExample is a reply in the code task's format that solves
// nothing, for the embedded policy's warm-up: a fenced python block
// holding a function of the name the question calls, when it calls
// one, returning a random number, or a program printing one.
func FormatExample(prompt string, rng *rand.Rand) string {
	n := rng.IntN(100)
	if m := reCalled.FindAllStringSubmatch(prompt, -1); len(m) > 0 && rng.IntN(2) == 0 {
		return fmt.Sprintf("```python\ndef %s(*args):\n    return %d\n```", m[len(m)-1][1], n)
	}
	return fmt.Sprintf("```python\nprint(%d)\n```", n)
}
