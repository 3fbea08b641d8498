package gateway

import (
	"bytes"
	"slices"
	"unsafe"

	"github.com/rllm-org/rllm-go/pkg/episode"
	"github.com/rllm-org/rllm-go/pkg/sampler"
)

// What a session's traces hold, stored once. A call that continues an
// earlier one (previous_response_id, or a client that sends the whole
// history again) repeats that call's messages and prompt tokens; its trace
// keeps them as a slice of the earlier trace's array, extended in place,
// so a chain of n calls holds its conversation once, not n times. Each
// trace's slices are clipped to their length (an append by a reader of
// Traces copies), and an array is extended in place only by the first
// call that continues it (a second continuation of the same call, a
// branch, gets a copy of its own).
type store struct {
	// arenas maps an array's first element to the array at its full
	// capacity and the length written into it so far.
	arenas map[any]arena
}

type arena struct {
	full any // []E at its full capacity
	used int
}

// share returns next as it is to be stored, and the bytes that adds (the
// arrays it allocates, at their capacity, and the payload of the
// elements not shared): when prev is a prefix of next (by eq), next's
// elements after prev's are written after prev's in prev's array, grown
// by doubling when it is full; otherwise next is copied into an array of
// its own.
func share[E any](st *store, prev, next []E, eq func(a, b E) bool, payload func(E) int) ([]E, int64) {
	if len(next) == 0 {
		return next, 0
	}
	if st.arenas == nil {
		st.arenas = map[any]arena{}
	}
	elem := int64(unsafe.Sizeof(next[0]))
	from := len(prefix(prev, next, eq))
	var added int64
	for _, e := range next[from:] {
		added += int64(payload(e))
	}
	if from > 0 {
		key := &prev[0]
		if a, ok := st.arenas[key]; ok && a.used == len(prev) {
			if full := a.full.([]E); cap(full) >= len(next) {
				full = append(full[:len(prev)], next[len(prev):]...)
				st.arenas[key] = arena{full: full, used: len(next)}
				return full[:len(next):len(next)], added
			}
			// The array is full: the chain moves to one twice the size
			// (the traces before keep the old one).
			delete(st.arenas, key)
		}
	}
	// A new array: its prefix elements share prev's strings.
	c := len(next)
	if from > 0 {
		c = 2 * len(next)
	}
	own := make([]E, len(next), c)
	copy(own, prev[:from])
	copy(own[from:], next[from:])
	st.arenas[&own[0]] = arena{full: own, used: len(next)}
	return own[:len(next):len(next)], added + int64(c)*elem
}

// prefix is prev when it is a prefix of next, else nil.
func prefix[E any](prev, next []E, eq func(a, b E) bool) []E {
	if len(prev) == 0 || len(prev) > len(next) {
		return nil
	}
	for i := range prev {
		if !eq(prev[i], next[i]) {
			return nil
		}
	}
	return prev
}

func sameMessage(a, b episode.Message) bool {
	return a.Role == b.Role && a.Content == b.Content && a.Reasoning == b.Reasoning && a.ToolCallID == b.ToolCallID &&
		a.Name == b.Name && slices.Equal(a.ToolCalls, b.ToolCalls)
}

func sameInt(a, b int) bool { return a == b }

const (
	toolCallSize = int(unsafe.Sizeof(episode.ToolCall{}))
	intSize      = int(unsafe.Sizeof(int(0)))
)

// messageBytes is what a message holds besides its own struct.
func messageBytes(m episode.Message) int {
	n := len(m.Role) + len(m.Content) + len(m.Reasoning) + len(m.ToolCallID) + len(m.Name)
	for _, c := range m.ToolCalls {
		n += toolCallSize + len(c.ID) + len(c.Type) + len(c.Function.Name) + len(c.Function.Arguments)
	}
	return n
}

func noPayload(int) int { return 0 }

// sameTools reports whether two calls offered the same tools.
func sameTools(a, b []sampler.Tool) bool {
	return slices.EqualFunc(a, b, func(x, y sampler.Tool) bool {
		return x.Type == y.Type && x.Function.Name == y.Function.Name && x.Function.Description == y.Function.Description &&
			bytes.Equal(x.Function.Parameters, y.Function.Parameters)
	})
}

func toolsBytes(ts []sampler.Tool) int64 {
	var n int64
	for _, t := range ts {
		n += int64(unsafe.Sizeof(t)) + int64(len(t.Type)+len(t.Function.Name)+len(t.Function.Description)+len(t.Function.Parameters))
	}
	return n
}

// keep stores t's slices, sharing what repeats prev (the call t
// continues, or nil), and returns the bytes t adds to the session.
func (st *store) keep(t *Trace, prev *Trace) int64 {
	var pm []episode.Message
	var pp []int
	var pt []sampler.Tool
	if prev != nil {
		pm, pp, pt = prev.Messages, prev.PromptIDs, prev.Tools
	}
	var added, n int64
	t.Messages, n = share(st, pm, t.Messages, sameMessage, messageBytes)
	added += n
	t.PromptIDs, n = share(st, pp, t.PromptIDs, sameInt, noPayload)
	added += n
	if prev != nil && len(t.Tools) > 0 && sameTools(pt, t.Tools) {
		t.Tools = pt
	} else {
		added += toolsBytes(t.Tools)
	}
	added += int64(unsafe.Sizeof(*t)) + int64(messageBytes(t.Response)) +
		int64(len(t.CompletionIDs))*int64(intSize) + int64(len(t.Logprobs))*8 +
		int64(len(t.TraceID)+len(t.SessionID)+len(t.Endpoint)+len(t.Model)+len(t.FinishReason)+len(t.StopReason)+len(t.WeightVersion))
	return added
}
