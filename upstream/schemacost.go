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
	w := &workCounter{root: doc, limit: limit, memo: map[string]int{}, active: map[string]bool{}, anchors: map[string]string{}}
	w.findAnchors(doc, "")
	return w.count(doc, "")
}

type workCounter struct {
	root    any
	limit   int
	memo    map[string]int  // JSON pointer -> work
	active  map[string]bool // pointers being expanded (a cycle counts once)
	anchors map[string]string
}

// Keywords whose value is one subschema, a map of them, or a list of them.
var (
	oneSchema = []string{"additionalProperties", "items", "contains", "propertyNames", "not", "if", "then", "else",
		"unevaluatedItems", "unevaluatedProperties", "additionalItems", "contentSchema"}
	schemaMap  = []string{"properties", "patternProperties", "dependentSchemas", "dependencies"}
	schemaList = []string{"allOf", "anyOf", "oneOf", "prefixItems", "items"}
	refs       = []string{"$ref", "$dynamicRef", "$recursiveRef"}
)

func (w *workCounter) add(a, b int) int {
	if a+b > w.limit {
		return w.limit + 1
	}
	return a + b
}

func (w *workCounter) count(node any, ptr string) int {
	obj, ok := node.(map[string]any)
	if !ok {
		return 1 // true, false, or not a schema (the compiler refuses that)
	}
	if n, ok := w.memo[ptr]; ok {
		return n
	}
	if w.active[ptr] {
		return 1
	}
	w.active[ptr] = true
	defer delete(w.active, ptr)
	n := 1
	for _, k := range oneSchema {
		if v, ok := obj[k]; ok {
			if _, isList := v.([]any); !isList {
				n = w.add(n, w.count(v, ptr+"/"+escape(k)))
			}
		}
	}
	for _, k := range schemaMap {
		if m, ok := obj[k].(map[string]any); ok {
			for name, v := range m {
				n = w.add(n, w.count(v, ptr+"/"+escape(k)+"/"+escape(name)))
			}
		}
	}
	for _, k := range schemaList {
		if l, ok := obj[k].([]any); ok {
			for i, v := range l {
				n = w.add(n, w.count(v, ptr+"/"+escape(k)+"/"+strconv.Itoa(i)))
			}
		}
	}
	for _, k := range refs {
		if ref, ok := obj[k].(string); ok {
			n = w.add(n, w.ref(ref))
		}
	}
	w.memo[ptr] = n
	return n
}

// ref is the work of the schema a reference names: a local JSON pointer
// or anchor; anything else (a meta-schema, a relative URI under an $id)
// counts as the whole document, which errs on the side of the bound.
func (w *workCounter) ref(ref string) int {
	frag, ok := strings.CutPrefix(ref, "#")
	if !ok {
		return w.count(w.root, "")
	}
	if frag == "" || strings.HasPrefix(frag, "/") {
		ptr, err := url.PathUnescape(frag)
		if err != nil {
			return w.count(w.root, "")
		}
		node, ok := w.resolve(ptr)
		if !ok {
			return 1 // the compiler refuses a dangling reference
		}
		return w.count(node, ptr)
	}
	if ptr, ok := w.anchors[frag]; ok {
		if node, ok := w.resolve(ptr); ok {
			return w.count(node, ptr)
		}
	}
	return w.count(w.root, "")
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
