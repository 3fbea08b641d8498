package config

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"reflect"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/v2"

	"github.com/rllm-org/rllm-go/configs"
	"github.com/rllm-org/rllm-go/internal/anyval"
	"github.com/rllm-org/rllm-go/internal/boundedio"
)

// Sources are the layers of one load, applied in this order on top of the
// embedded defaults: Files, Environ, Map, Overrides, Sets, Args.
type Sources struct {
	// Context stops reading files when it is cancelled (a FIFO with no
	// writer, a slow pipe); nil means context.Background().
	Context context.Context
	// Files are YAML files (--config), later ones overriding earlier ones.
	Files []string
	// ReadFile reads a file; nil reads at most MaxFileBytes, stopping when
	// Context is cancelled. Tests inject their own.
	ReadFile func(name string) ([]byte, error)
	// Environ is the process environment as "NAME=value"; only RLLM_
	// variables are read.
	Environ []string
	// Map holds library overrides with dot keys or nested maps:
	// {"data.train_batch_size": 8}.
	Map map[string]any
	// Overrides are library "key=value" strings.
	Overrides []string
	// Sets are --set flags; Args bare key=value command-line arguments.
	Sets []string
	Args []string
}

// Loaded is a resolved configuration and where each value came from.
type Loaded struct {
	Config  *Config
	Origins map[string]Origin
	// Notices are one-line remarks for the user (aliases used, variables
	// ignored); they are not errors.
	Notices []string
	store   *koanf.Koanf
}

// Load layers the sources over the embedded defaults, checks every value
// against the schema and validates the result. Every problem is returned
// at once, as Errors (exit code 2).
func Load(src Sources) (*Loaded, error) {
	ld, err := LoadAll(src)
	if err != nil {
		return nil, err
	}
	return ld, nil
}

// LoadAll is Load that also returns the configuration with its errors
// (values that failed their checks are left at what the layer below set),
// so a caller can check further (the plan, the data) and report every
// problem at once. When it returns an error the Loaded must not be used
// to run, and what is checked further must not rely on the values
// validation refused.
func LoadAll(src Sources) (*Loaded, error) {
	base, err := loadDefaults()
	if err != nil {
		return nil, err
	}
	ld := &loader{
		store:     koanf.New("."),
		origins:   maps.Clone(base.origins),
		notedKeys: map[string]bool{},
	}
	// A hand-written deep copy: koanf's Copy goes through reflection and
	// was a third of a load.
	if err := ld.store.Load(treeProvider(deepCopy(defaults.tree).(map[string]any)), nil); err != nil {
		return nil, fmt.Errorf("embedded defaults are broken: %w", err)
	}

	ctx := src.Context
	if ctx == nil {
		ctx = context.Background()
	}
	readFile := src.ReadFile
	if readFile == nil {
		readFile = func(name string) ([]byte, error) { return boundedio.ReadFile(ctx, name, MaxFileBytes) }
	}
	for _, name := range src.Files {
		data, err := readFile(name)
		if err != nil {
			if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
				return nil, err // interrupted: not the user's mistake
			}
			ld.errs.add("", Origin{Layer: "file", Source: name}, "%s", fileErrorMsg(err))
			continue
		}
		entries, errs := parseYAML(name, data, "file")
		ld.errs = append(ld.errs, errs...)
		ld.apply(entries)
	}

	envEntries, errs, notices := parseEnv(src.Environ)
	ld.errs = append(ld.errs, errs...)
	ld.notices = append(ld.notices, notices...)
	ld.apply(envEntries)

	if len(src.Map) > 0 {
		entries, errs := parseMap(src.Map)
		ld.errs = append(ld.errs, errs...)
		ld.apply(entries)
	}
	ld.apply(ld.parseOverrides(src.Overrides, "api"))
	// --set and bare arguments are one layer: a user typing both for the
	// same key with different spellings has made a conflict to report.
	ld.apply(append(ld.parseOverrides(src.Sets, "set"), ld.parseOverrides(src.Args, "arg")...))

	// Values that failed their checks were not applied, so validation
	// still runs and every problem is reported in one go.
	ld.interpolate()
	cfg, err := decodeLeaves(ld.store)
	if err != nil {
		return nil, err
	}
	ld.notices = append(ld.notices, uiLogger(cfg)...)
	out := &Loaded{Config: cfg, Origins: ld.origins, store: ld.store}
	set := func(key string) bool { o := out.origin(key); return o.Layer != "" && o.Layer != "default" }
	notices, ferrs := judgeForeign(ld.foreign, cfg, set)
	out.Notices = append(ld.notices, notices...)
	verrs := validate(cfg, out.origin)
	if errs := append(append(ld.errs, ferrs...), verrs...); len(errs) > 0 {
		return out, errs
	}
	return out, nil
}

// defaults is the embedded defaults, parsed and applied once per process:
// every load starts from a copy.
var defaults struct {
	once    sync.Once
	store   *koanf.Koanf
	tree    map[string]any // store's nested map, never handed out
	origins map[string]Origin
	err     error
}

func loadDefaults() (*loader, error) {
	defaults.once.Do(func() {
		ld := &loader{store: koanf.New("."), origins: map[string]Origin{}, notedKeys: map[string]bool{}}
		entries, errs := parseYAML(configs.DefaultName, configs.DefaultYAML, "default")
		if len(errs) == 0 {
			ld.apply(entries)
			errs = ld.errs
		}
		if len(errs) > 0 {
			defaults.err = fmt.Errorf("embedded defaults are broken: %w", errs)
			return
		}
		defaults.store, defaults.origins = ld.store, ld.origins
		defaults.tree = ld.store.Raw()
	})
	if defaults.err != nil {
		return nil, defaults.err
	}
	return &loader{store: defaults.store, origins: defaults.origins}, nil
}

// FromMap is the library form rLLM's AgentTrainer documents: defaults plus
// dot-key overrides such as {"data.train_batch_size": 8}.
func FromMap(m map[string]any) (*Config, error) {
	ld, err := Load(Sources{Map: m})
	if err != nil {
		return nil, err
	}
	return ld.Config, nil
}

// FromOverrides is the other documented library form: defaults plus
// "key=value" strings, typed as YAML.
func FromOverrides(overrides []string) (*Config, error) {
	ld, err := Load(Sources{Overrides: overrides})
	if err != nil {
		return nil, err
	}
	return ld.Config, nil
}

// origin returns where key (or the nearest map it lies in) was set.
func (l *Loaded) origin(key string) Origin {
	for k := key; k != ""; {
		if o, ok := l.Origins[k]; ok {
			return o
		}
		i := strings.LastIndexByte(k, '.')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return Origin{}
}

// Origin returns where key was set.
func (l *Loaded) Origin(key string) Origin { return l.origin(key) }

// MaxFileBytes bounds one config file; a config is a few kilobytes, so
// anything near this is a mistake such as -c /dev/zero.
const MaxFileBytes = 8 << 20

func fileErrorMsg(err error) string {
	var pe *fs.PathError
	name := ""
	if errors.As(err, &pe) {
		name = pe.Path
	}
	var tl *boundedio.TooLargeError
	switch {
	case errors.As(err, &tl):
		return fmt.Sprintf("config file %s is larger than the limit of %s; --config takes a YAML file of a few kilobytes", tl.Path, boundedio.Size(tl.Limit))
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Sprintf("config file %s does not exist; check the --config path", name)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Sprintf("%s is a directory; --config takes a YAML file", name)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Sprintf("cannot read config file %s: permission denied", name)
	}
	return fmt.Sprintf("cannot read config file: %v", err)
}

type loader struct {
	store     *koanf.Koanf
	origins   map[string]Origin
	errs      Errors
	notices   []string
	notedKeys map[string]bool
	foreign   []foreignKey
}

func (ld *loader) parseOverrides(list []string, layer string) []entry {
	var entries []entry
	for _, s := range list {
		e, err := parseOverride(s, layer)
		if err != nil {
			ld.errs = append(ld.errs, err)
			continue
		}
		entries = append(entries, e)
	}
	return entries
}

// apply type-checks one layer's entries and writes them to the store.
// Plain values are written in one batch per layer: koanf re-flattens the
// whole tree on every write, which made a load quadratic in its keys.
func (ld *loader) apply(entries []entry) {
	type setBy struct {
		e   entry
		val any
	}
	layerSet := map[string]setBy{}
	pending := map[string]any{}
	flush := func() {
		if len(pending) == 0 {
			return
		}
		if err := ld.store.Load(confmap.Provider(pending, "."), nil); err != nil {
			ld.errs.add("", Origin{}, "cannot apply configuration layer: %v", err)
		}
		pending = map[string]any{}
	}
	defer flush()
	s := schema()
	for _, e := range entries {
		if e.foreign != nil {
			ld.foreign = append(ld.foreign, foreignKey{raw: e.rawKey, row: *e.foreign, value: e.value, origin: e.origin})
			continue
		}
		if e.aliased && !ld.notedKeys[e.rawKey] {
			ld.notedKeys[e.rawKey] = true
			ld.notices = append(ld.notices, fmt.Sprintf("%s is the rLLM/verl name of %s; using %s", e.rawKey, e.key, e.key))
		}
		l := s.leaves[e.key]
		// Map-valued keys merge with what is below them, so their order
		// against other writes matters: write them one at a time.
		mapish := l == nil || l.kind == kindOpenMap || l.kind == kindStringMap
		switch e.op {
		case opDelete:
			flush()
			switch {
			case l == nil: // a key inside an args map
				ld.store.Delete(e.key)
				ld.origins[e.key] = e.origin
			case l.nullable:
				ld.set(e.key, nil, e.origin)
			case mapish || l.kind == kindStringList || l.kind == kindFloatList:
				ld.store.Delete(e.key)
				empty, _ := coerce(l, nil, "", false)
				if l.kind == kindFloatList {
					empty = []float64{}
				}
				ld.set(e.key, empty, e.origin)
			default:
				ld.errs.add(e.key, e.origin, "is required and cannot be deleted; set it to a value instead")
			}
			continue
		case opAppend:
			if l == nil || (l.kind != kindStringList && l.kind != kindFloatList) {
				ld.errs.add(e.key, e.origin, "+= appends to a list, and this key is not a list; use = instead")
				continue
			}
			cur, ok := pending[e.key]
			if !ok {
				cur = ld.store.Get(e.key)
			}
			items, _ := asList(cur)
			if more, ok := asList(e.value); ok {
				items = append(items, more...)
			} else {
				items = append(items, e.value)
			}
			e.value, e.hasRaw = items, false
		}
		val := e.value
		if l != nil {
			v, msg := coerce(l, e.value, e.raw, e.hasRaw)
			if msg != "" {
				ld.errs.add(e.key, e.origin, "%s", msg)
				continue
			}
			val = v
		}
		if prev, ok := layerSet[e.key]; ok && prev.e.rawKey != e.rawKey && e.op == opSet && prev.e.op == opSet &&
			(prev.e.aliased || e.aliased) && !reflect.DeepEqual(prev.val, val) {
			ld.errs.add(e.key, e.origin, "conflicting values: %s sets %s and %s sets %s; keep one",
				prev.e.origin, show(prev.val), e.origin, show(val))
			continue
		}
		layerSet[e.key] = setBy{e, val}
		if mapish {
			flush()
			ld.set(e.key, val, e.origin)
			continue
		}
		pending[e.key] = val
		ld.origins[e.key] = e.origin
	}
}

func (ld *loader) set(key string, val any, o Origin) {
	if err := ld.store.Set(key, val); err != nil {
		ld.errs.add(key, o, "cannot be set: %v", err)
		return
	}
	ld.origins[key] = o
}

// interpolate resolves ${key} references in string values, as Hydra does
// for default_local_dir.
func (ld *loader) interpolate() {
	s := schema()
	for _, key := range s.order {
		if s.leaves[key].kind != kindString {
			continue
		}
		v, ok := ld.store.Get(key).(string)
		if !ok || !strings.Contains(v, "${") {
			continue
		}
		out, msg := ld.resolve(key, v, map[string]bool{key: true})
		if msg != "" {
			ld.errs.add(key, ld.origins[key], "%s", msg)
			continue
		}
		_ = ld.store.Set(key, out)
	}
}

func (ld *loader) resolve(key, v string, visiting map[string]bool) (string, string) {
	var b strings.Builder
	for {
		i := strings.Index(v, "${")
		if i < 0 {
			b.WriteString(v)
			return b.String(), ""
		}
		j := strings.IndexByte(v[i:], '}')
		if j < 0 {
			return "", fmt.Sprintf("has an unterminated ${ in %q", v)
		}
		ref := v[i+2 : i+j]
		b.WriteString(v[:i])
		v = v[i+j+1:]
		l := schema().leaves[ref]
		if l == nil || l.kind == kindOpenMap || l.kind == kindStringMap || l.kind == kindStringList || l.kind == kindFloatList {
			return "", fmt.Sprintf("refers to ${%s}, which is not a single value of this configuration", ref)
		}
		if visiting[ref] {
			return "", fmt.Sprintf("refers to ${%s}, which refers back to it", ref)
		}
		val := ld.store.Get(ref)
		str := fmt.Sprint(val)
		if val == nil {
			str = "null"
		}
		if sv, ok := val.(string); ok && strings.Contains(sv, "${") {
			visiting[ref] = true
			r, msg := ld.resolve(ref, sv, visiting)
			delete(visiting, ref)
			if msg != "" {
				return "", msg
			}
			str = r
		}
		b.WriteString(str)
	}
}

// Keys lists every leaf key in schema order (for completion and docs).
func Keys() []string {
	return append([]string(nil), schema().order...)
}

// deepCopy copies the maps and slices of a configuration tree; scalars
// are immutable and shared.
func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	case []string:
		return append([]string(nil), x...)
	case []float64:
		return append([]float64(nil), x...)
	case map[string]string:
		return maps.Clone(x)
	}
	return v
}

// treeProvider hands koanf a nested map it may keep (confmap copies it
// again through reflection).
type treeProvider map[string]any

func (p treeProvider) ReadBytes() ([]byte, error) {
	return nil, errors.New("treeProvider has no bytes")
}
func (p treeProvider) Read() (map[string]any, error) { return p, nil }

// decodeLeaves fills a Config from the store leaf by leaf through the
// schema: every value was type-checked when it was applied, so this is a
// plain copy, without the reflection-driven deep copy and decoding of
// koanf's Unmarshal (half of a load). decode is the reference it is
// tested against.
func decodeLeaves(store *koanf.Koanf) (*Config, error) {
	var cfg Config
	root := reflect.ValueOf(&cfg).Elem()
	s := schema()
	for _, key := range s.order {
		l := s.leaves[key]
		if err := setLeaf(root.FieldByIndex(l.index), l, store.Get(key)); err != nil {
			return nil, fmt.Errorf("internal error decoding the configuration: %s: %w", key, err)
		}
	}
	return &cfg, nil
}

func setLeaf(f reflect.Value, l *leaf, v any) error {
	if v == nil {
		if l.nullable || l.kind == kindOpenMap || l.kind == kindStringMap || l.kind == kindStringList || l.kind == kindFloatList {
			return nil
		}
		return errors.New("missing value")
	}
	if l.nullable {
		p := reflect.New(f.Type().Elem())
		f.Set(p)
		f = p.Elem()
	}
	switch l.kind {
	case kindInt:
		n, ok := anyval.Float(v)
		if !ok || n != float64(int(n)) {
			return fmt.Errorf("%v is not a whole number", v)
		}
		f.SetInt(int64(n))
	case kindFloat:
		n, ok := anyval.Float(v)
		if !ok {
			return fmt.Errorf("%v is not a number", v)
		}
		f.SetFloat(n)
	case kindBool:
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("%v is not a boolean", v)
		}
		f.SetBool(b)
	case kindString:
		str, ok := v.(string)
		if !ok {
			return fmt.Errorf("%v is not a string", v)
		}
		f.SetString(str)
	case kindStringList:
		items, ok := asList(v)
		if !ok {
			return fmt.Errorf("%v is not a list", v)
		}
		if len(items) == 0 {
			return nil // nil, as mapstructure leaves it
		}
		out := make([]string, len(items))
		for i, it := range items {
			if out[i], ok = it.(string); !ok {
				return fmt.Errorf("item %d (%v) is not a string", i, it)
			}
		}
		f.Set(reflect.ValueOf(out))
	case kindFloatList:
		items, ok := asList(v)
		if !ok {
			return fmt.Errorf("%v is not a list", v)
		}
		if len(items) == 0 {
			return nil
		}
		out := make([]float64, len(items))
		for i, it := range items {
			if out[i], ok = anyval.Float(it); !ok {
				return fmt.Errorf("item %d (%v) is not a number", i, it)
			}
		}
		f.Set(reflect.ValueOf(out))
	case kindOpenMap:
		m, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%v is not a mapping", v)
		}
		f.Set(reflect.ValueOf(m))
	case kindStringMap:
		out := map[string]string{}
		switch m := v.(type) {
		case map[string]string:
			maps.Copy(out, m)
		case map[string]any:
			for k, e := range m {
				str, ok := e.(string)
				if !ok {
					return fmt.Errorf("%s: %v is not a string", k, e)
				}
				out[k] = str
			}
		default:
			return fmt.Errorf("%v is not a mapping", v)
		}
		f.Set(reflect.ValueOf(out))
	}
	return nil
}

// uiLogger reads rLLM's ui logger (its web UI) as rllm's: rllm view,
// which shows a run from its metrics.jsonl (the jsonl logger, which ui
// turns on) and the episodes the trainer keeps.
func uiLogger(c *Config) []string {
	if !slices.Contains(c.Trainer.Logger, "ui") {
		return nil
	}
	c.Trainer.Logger = slices.DeleteFunc(c.Trainer.Logger, func(l string) bool { return l == "ui" })
	if !slices.Contains(c.Trainer.Logger, "jsonl") {
		c.Trainer.Logger = append(c.Trainer.Logger, "jsonl")
	}
	return []string{"trainer.logger ui is rLLM's web UI; rllm's is rllm view, which shows this run from its metrics.jsonl (logger jsonl) and kept episodes: rllm view " + c.Trainer.DefaultLocalDir}
}
