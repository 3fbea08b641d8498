package dataset

import (
	"reflect"
	"testing"

	"github.com/rllm-org/rllm-go/pkg/episode"
)

func TestTaskID(t *testing.T) {
	tests := []struct {
		task   episode.Task
		want   string
		wantOK bool
	}{
		{episode.Task{"task_id": "abc", "uid": "u", "id": int64(1)}, "abc", true},
		{episode.Task{"uid": "u-1", "id": int64(1)}, "u-1", true},
		{episode.Task{"id": int64(17)}, "17", true},
		{episode.Task{"id": 17}, "17", true},
		{episode.Task{"id": 17.0}, "17", true},
		{episode.Task{"id": 17.5}, "", false},
		{episode.Task{"id": ""}, "", false},
		{episode.Task{"task_id": "", "id": "x"}, "x", true},
		{episode.Task{"id": map[string]any{}}, "", false},
		{episode.Task{"question": "q"}, "", false},
	}
	for _, tt := range tests {
		got, ok := TaskID(tt.task)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("TaskID(%v) = %q, %v; want %q, %v", tt.task, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestAssignIDs(t *testing.T) {
	tasks := []episode.Task{{"q": "a"}, {"q": "b", "id": int64(7)}, nil, {"q": "d"}}
	must(t, AssignIDs("train.jsonl", tasks))
	var got []string
	for _, task := range tasks {
		id, ok := TaskID(task)
		if !ok {
			t.Fatalf("task %v has no id after AssignIDs", task)
		}
		got = append(got, id)
	}
	if want := []string{"0", "7", "2", "3"}; !reflect.DeepEqual(got, want) {
		t.Errorf("ids %v, want %v", got, want)
	}
	if _, added := tasks[1][IDKey]; added {
		t.Error("AssignIDs added task_id to a row that has an id")
	}
}

func TestAssignIDsDuplicate(t *testing.T) {
	tasks := []episode.Task{{"id": "x"}, {"id": "y"}, {"uid": "x"}}
	err := AssignIDs("train.jsonl", tasks)
	assertUserError(t, err, `train.jsonl: row 2: task id "x" is also the id of row 0; ids (columns [task_id uid id]) must be unique because a task's episodes are grouped by id — fix the column or drop it to use row indexes`)
}

func TestLoad(t *testing.T) {
	tasks, err := Load(t.Context(), "testdata/math.csv", Options{})
	must(t, err)
	for i, task := range tasks {
		if id, _ := TaskID(task); id != string(rune('0'+i)) {
			t.Errorf("row %d has id %q", i, id)
		}
	}
}
