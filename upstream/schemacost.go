package upstream

import (
	"net/url"
	"strconv"
	"strings"
)

// maxSchemaWork bounds how many subschemas validating one input value
// against an upstream's inputSchema may evaluate, counted statically with
// every $ref expanded (a reference back into a schema being expanded
// counts once: recursion follows the input's own depth). A few kilobytes
// of schema whose definitions each refer to the next twice would
// otherwise cost 2^n evaluations on every call (22 levels: 31 s of a core,
// 30 levels: hours), so such a tool is not served. Ordinary tool schemas
// count in the tens to hundreds.
const maxSchemaWork = 10_000

// schemaWork is the static count of subschema evaluations of doc, at most
// limit+1 (past the limit it stops counting).
func schemaWork(doc any, limit int) int {
	w := &workCounter{root: doc, limit: limit, memo: map[string]int{}, active: map[string]int{}, anchors: map[string]string{},
		back: map[string][][]string{}, posAt: map[string]int{}}
	w.findAnchors(doc, "")
	n, _ := w.count(doc, "")
	if w.recursive {
		return limit + 1
	}
	return n
}

type workCounter struct {
	root    any
	limit   int
	memo    map[string]int // JSON pointer -> work
	active  map[string]int // pointers being expanded -> their call depth (a cycle counts once)
	anchors map[string]string
	depth   int            // count's call depth
	pos     []string       // the instance positions descended to so far
	posAt   map[string]int // len(pos) when each active schema was entered
	// back lists, per schema that a reference re-enters, the instance
	// positions each such reference descends by from it.
	back map[string][][]string
	// recursive: two references back into one schema can both apply at
	// one instance location (overlap), so each level of the input's
	// nesting multiplies the work (2^depth), as in anyOf [allOf [#,
	// false], #] under a property; or a schema is re-entered from more
	// places than maxBackRefs, too many to judge.
	recursive bool
	steps     int // count's calls so far
}

// maxSchemaSteps bounds the analysis itself: a schema it cannot judge in
// that many steps is not served either (an ordinary schema takes about as
// many steps as it has subschemas).
const maxSchemaSteps = 1_000_000

// maxBackRefs bounds the references back into one schema that are judged
// (a tree's or an expression language's schema has a handful).
const maxBackRefs = 256

// overlap: one instance path can be both a prefix of one and of the other
// (positions equal, or a wildcard of the same kind).
func overlap(a, b []string) bool {
	for i := range min(len(a), len(b)) {
		x, y := a[i], b[i]
		if x == y || (x == "o:*" && y[:2] == "o:") || (y == "o:*" && x[:2] == "o:") ||
			(x == "a:*" && y[:2] == "a:") || (y == "a:*" && x[:2] == "a:") {
			continue
		}
		return false
	}
	return true
}

// Keywords whose value is one subschema, a map of them, or a list of
// them, with the instance position each applies at: "" the same value,
// "o:<name>" or "o:*" a member of an object, "a:<i>" or "a:*" an item of
// an array.
var (
	oneSchema = map[string]string{"additionalProperties": "o:*", "items": "a:*", "contains": "a:*", "propertyNames": "o:*",
		"not": "", "if": "", "then": "", "else": "", "unevaluatedItems": "a:*", "unevaluatedProperties": "o:*",
		"additionalItems": "a:*", "contentSchema": "o:*"}
	schemaMap  = map[string]string{"properties": "o:", "patternProperties": "o:*", "dependentSchemas": "", "dependencies": ""}
	schemaList = map[string]string{"allOf": "", "anyOf": "", "oneOf": "", "prefixItems": "a:", "items": "a:"}
	refs       = []string{"$ref", "$dynamicRef", "$recursiveRef"}
)

func (w *workCounter) add(a, b int) int {
	if a+b > w.limit {
		return w.limit + 1
	}
	return a + b
}

// count is the work of node at ptr, and the lowest call depth of a schema
// being expanded that its references re-entered (below the node's own:
// the result depends on where it was reached from, so it is not memoized).
func (w *workCounter) count(node any, ptr string) (int, int) {
	obj, ok := node.(map[string]any)
	if !ok {
		return 1, w.depth + 1 // true, false, or not a schema (the compiler refuses that)
	}
	if w.steps++; w.steps > maxSchemaSteps {
		w.recursive = true // too large to judge
	}
	if w.recursive {
		return w.limit + 1, w.depth + 1
	}
	if n, ok := w.memo[ptr]; ok {
		return n, w.depth + 1
	}
	if d, ok := w.active[ptr]; ok {
		path := append([]string(nil), w.pos[w.posAt[ptr]:]...)
		for _, q := range w.back[ptr] {
			if overlap(path, q) {
				w.recursive = true
			}
		}
		if len(w.back[ptr]) >= maxBackRefs {
			w.recursive = true
		}
		w.back[ptr] = append(w.back[ptr], path)
		if w.recursive {
			return w.limit + 1, d
		}
		return 1, d
	}
	w.depth++
	defer func() { w.depth-- }()
	w.active[ptr] = w.depth
	w.posAt[ptr] = len(w.pos)
	defer delete(w.active, ptr)
	n, low := 1, w.depth+1
	sub := func(v any, at, position string) {
		if n > w.limit {
			return
		}
		if position != "" {
			w.pos = append(w.pos, position)
			defer func() { w.pos = w.pos[:len(w.pos)-1] }()
		}
		c, l := w.count(v, at)
		n, low = w.add(n, c), min(low, l)
	}
	for k, position := range oneSchema {
		if v, ok := obj[k]; ok {
			if _, isList := v.([]any); !isList {
				sub(v, ptr+"/"+escape(k), position)
			}
		}
	}
	for k, position := range schemaMap {
		if m, ok := obj[k].(map[string]any); ok {
			for name, v := range m {
				p := position
				if p == "o:" {
					p += name
				}
				sub(v, ptr+"/"+escape(k)+"/"+escape(name), p)
			}
		}
	}
	for k, position := range schemaList {
		if l, ok := obj[k].([]any); ok {
			for i, v := range l {
				p := position
				if p == "a:" {
					p += strconv.Itoa(i)
				}
				sub(v, ptr+"/"+escape(k)+"/"+strconv.Itoa(i), p)
			}
		}
	}
	for _, k := range refs {
		if ref, ok := obj[k].(string); ok && n <= w.limit {
			target, at := w.ref(ref)
			c, l := w.count(target, at)
			n, low = w.add(n, c), min(low, l)
		}
	}
	if low > w.depth {
		w.memo[ptr] = n
	}
	return n, low
}

// ref is the schema a reference names and its pointer: a local JSON
// pointer or anchor; anything else (a meta-schema, a relative URI under
// an $id) is taken as the whole document, which errs on the side of the
// bound. A dangling reference is a schema of its own (the compiler
// refuses it).
func (w *workCounter) ref(ref string) (any, string) {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return w.root, ""
	}
	if frag == "" || strings.HasPrefix(frag, "/") {
		ptr, err := url.PathUnescape(frag)
		if err != nil {
			return w.root, ""
		}
		node, ok := w.resolve(ptr)
		if !ok {
			return true, "dangling:" + ptr
		}
		return node, ptr
	}
	if ptr, ok := w.anchors[frag]; ok {
		if node, ok := w.resolve(ptr); ok {
			return node, ptr
		}
	}
	return w.root, ""
}

func (w *workCounter) resolve(ptr string) (any, bool) {
	node := w.root
	if ptr == "" {
		return node, true
	}
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch v := node.(type) {
		case map[string]any:
			next, ok := v[tok]
			if !ok {
				return nil, false
			}
			node = next
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(v) {
				return nil, false
			}
			node = v[i]
		default:
			return nil, false
		}
	}
	return node, true
}

// findAnchors maps every $anchor and $dynamicAnchor to its pointer.
func (w *workCounter) findAnchors(node any, ptr string) {
	switch v := node.(type) {
	case map[string]any:
		for _, k := range []string{"$anchor", "$dynamicAnchor"} {
			if a, ok := v[k].(string); ok {
				if _, dup := w.anchors[a]; !dup {
					w.anchors[a] = ptr
				}
			}
		}
		for k, c := range v {
			w.findAnchors(c, ptr+"/"+escape(k))
		}
	case []any:
		for i, c := range v {
			w.findAnchors(c, ptr+"/"+strconv.Itoa(i))
		}
	}
}

func escape(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}
