package inputschema

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
)

// object is a JSON object that keeps its members' order, so that the
// advertised schema lists properties as the tool's source does (models
// fill arguments in the order they are shown).
type object struct {
	keys []string
	vals map[string]any
}

func (o *object) get(k string) any { return o.vals[k] }

func (o *object) set(k string, v any) {
	if _, ok := o.vals[k]; !ok {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = v
}

// decodeOrdered decodes one JSON value, objects as *object.
func decodeOrdered(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &object{vals: map[string]any{}}
		for dec.More() {
			k, err := dec.Token()
			if err != nil {
				return nil, err
			}
			key, _ := k.(string)
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			o.set(key, v)
		}
		_, err := dec.Token()
		return o, err
	case json.Delim('['):
		arr := []any{}
		for dec.More() {
			v, err := decodeOrdered(dec)
			if err != nil {
				return nil, err
			}
			arr = append(arr, v)
		}
		_, err := dec.Token()
		return arr, err
	}
	return tok, nil
}

// encodeOrdered writes v compactly, without HTML escaping.
func encodeOrdered(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case *object:
		buf.WriteByte('{')
		for i, k := range x.keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := encodeOrdered(buf, k); err != nil {
				return err
			}
			buf.WriteByte(':')
			if err := encodeOrdered(buf, x.vals[k]); err != nil {
				return err
			}
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := encodeOrdered(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
	default:
		enc := json.NewEncoder(buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(x); err != nil {
			return err
		}
		buf.Truncate(buf.Len() - 1) // Encode's newline
	}
	return nil
}

// parseOrdered decodes src, one JSON object.
func parseOrdered(src string) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(src)))
	dec.UseNumber()
	v, err := decodeOrdered(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the schema")
	}
	o, ok := v.(*object)
	if !ok {
		return nil, errors.New("the schema is not a JSON object")
	}
	return o, nil
}
