package dataset

import (
	"math"
	"strconv"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

// IDColumns are the columns a task's id is taken from, first match wins.
var IDColumns = []string{"task_id", "uid", "id"}

// IDKey is the column AssignIDs fills for rows that have no id.
const IDKey = "task_id"

// TaskID returns the task's id: the first of IDColumns holding a
// non-empty string or an integer (an integral float counts). ok is false
// when the row has none.
func TaskID(t episode.Task) (id string, ok bool) {
	for _, col := range IDColumns {
		switch v := t[col].(type) {
		case string:
			if v != "" {
				return v, true
			}
		case int64:
			return strconv.FormatInt(v, 10), true
		case int:
			return strconv.Itoa(v), true
		case float64:
			if v == math.Trunc(v) && math.Abs(v) < 1<<53 {
				return strconv.FormatInt(int64(v), 10), true
			}
		}
	}
	return "", false
}

// AssignIDs gives every task without an id (see TaskID) its 0-based row
// index, as a decimal string under IDKey. The row index is unique in the
// file and does not move when the loader shuffles or a run resumes, so
// episode ids ("task_id:rollout_index") stay stable; a content hash
// would not be unique when a dataset repeats a row.
//
// Ids must be unique because the episodes of one task form a group for
// advantages; two rows with the same id are an *Error naming both rows.
// path is only used in messages.
func AssignIDs(path string, tasks []episode.Task) error {
	seen := make(map[string]int, len(tasks))
	for i, t := range tasks {
		if t == nil {
			t = episode.Task{}
			tasks[i] = t
		}
		id, ok := TaskID(t)
		if !ok {
			id = strconv.Itoa(i)
			t[IDKey] = id
		}
		if first, dup := seen[id]; dup {
			return rowError(path, i, nil, "task id %q is also the id of row %d; ids (columns %v) must be unique because a task's episodes are grouped by id — fix the column or drop it to use row indexes", id, first, IDColumns)
		}
		seen[id] = i
	}
	return nil
}
