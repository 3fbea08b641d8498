package config

import (
	"reflect"
	"sort"
	"strings"
	"sync"

	"github.com/rllm-org/rllm-go/internal/suggest"
)

// kind is what a leaf key accepts.
type kind int

const (
	kindInt kind = iota
	kindFloat
	kindBool
	kindString
	kindStringList
	kindFloatList
	kindOpenMap   // map[string]any: free-form arguments
	kindStringMap // map[string]string
)

func (k kind) describe() string {
	switch k {
	case kindInt:
		return "a whole number"
	case kindFloat:
		return "a number"
	case kindBool:
		return "true or false"
	case kindString:
		return "a string"
	case kindStringList:
		return "a list of strings, e.g. [a, b]"
	case kindFloatList:
		return "a list of numbers, e.g. [0.9, 0.999]"
	default:
		return "a mapping, e.g. {a: 1}"
	}
}

// leaf is one settable key of the tree.
type leaf struct {
	key      string
	kind     kind
	nullable bool
	index    []int // the field in Config (reflect.Value.FieldByIndex)
}

// schemaInfo is the tree derived from the Config struct's koanf tags.
type schemaInfo struct {
	leaves   map[string]*leaf
	order    []string        // leaves in struct order
	sections map[string]bool // keys that hold other keys (data, rollout.retry, ...)
}

var (
	schemaOnce sync.Once
	theSchema  *schemaInfo
)

func schema() *schemaInfo {
	schemaOnce.Do(func() {
		s := &schemaInfo{leaves: map[string]*leaf{}, sections: map[string]bool{}}
		s.walk(reflect.TypeOf(Config{}), "", nil)
		theSchema = s
	})
	return theSchema
}

func (s *schemaInfo) walk(t reflect.Type, prefix string, index []int) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := f.Tag.Get("koanf")
		if name == "" {
			continue
		}
		key := name
		if prefix != "" {
			key = prefix + "." + name
		}
		ft := f.Type
		idx := append(append([]int(nil), index...), i)
		l := &leaf{key: key, index: idx}
		if ft.Kind() == reflect.Pointer {
			l.nullable = true
			ft = ft.Elem()
		}
		switch ft.Kind() {
		case reflect.Struct:
			s.sections[key] = true
			s.walk(ft, key, idx)
			continue
		case reflect.Int:
			l.kind = kindInt
		case reflect.Float64:
			l.kind = kindFloat
		case reflect.Bool:
			l.kind = kindBool
		case reflect.String:
			l.kind = kindString
		case reflect.Slice:
			if ft.Elem().Kind() == reflect.Float64 {
				l.kind = kindFloatList
			} else {
				l.kind = kindStringList
			}
		case reflect.Map:
			if ft.Elem().Kind() == reflect.String {
				l.kind = kindStringMap
			} else {
				l.kind = kindOpenMap
			}
		default:
			panic("config: unsupported field type " + ft.String() + " for " + key)
		}
		s.leaves[key] = l
		s.order = append(s.order, key)
	}
}

// mapLeaf returns the map-valued leaf that key lies inside of
// (agent.args.foo lies inside agent.args), or nil.
func (s *schemaInfo) mapLeaf(key string) *leaf {
	for i := strings.LastIndexByte(key, '.'); i > 0; i = strings.LastIndexByte(key[:i], '.') {
		if l, ok := s.leaves[key[:i]]; ok && (l.kind == kindOpenMap || l.kind == kindStringMap) {
			return l
		}
	}
	return nil
}

// known lists every leaf and section key, for suggestions.
func (s *schemaInfo) known() []string {
	out := make([]string, 0, len(s.leaves)+len(s.sections))
	out = append(out, s.order...)
	for k := range s.sections {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// suggest returns the known key closest to an unknown one, or "".
func (s *schemaInfo) suggest(key string) string {
	last := key[strings.LastIndexByte(key, '.')+1:]
	// Closeness is judged on the leaf's length: a short leaf ("d_ff")
	// must not borrow the slack of a long section path.
	best, bestDist := "", suggest.Near(len(last))+1
	for _, k := range s.known() {
		d := suggest.Distance(key, k)
		// A right leaf name under the wrong section is a common slip.
		if strings.HasSuffix(k, "."+last) && d > 1 {
			d = min(d, 2)
		}
		if d < bestDist || (d == bestDist && best != "" && k < best) {
			best, bestDist = k, d
		}
	}
	return best
}
