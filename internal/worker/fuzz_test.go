package worker

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
)

// FuzzFrames (issue 20 item 6): whatever bytes a peer sends (a worker
// that went wrong, or was taken over), Recv returns frames or an error,
// never panics and never allocates past MaxFrame; a frame it returns
// survives Send and Recv unchanged.
func FuzzFrames(f *testing.F) {
	frame := func(v any) []byte {
		b, _ := json.Marshal(v)
		return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
	}
	f.Add(frame(map[string]any{"v": 1, "type": "hello", "pid": 42, "types": map[string]string{"shell": "abc"}}))
	f.Add(frame(map[string]any{"v": 1, "type": "log", "log": map[string]any{"level": "info", "msg": "x", "attrs": map[string]any{"a": 1}}}))
	f.Add(frame(map[string]any{"v": 1, "type": "result", "id": "t1", "retire": true, "result": map[string]any{"status": 0}}))
	f.Add(frame(map[string]any{"v": 2, "type": "hello"}))
	f.Add(append(frame(map[string]any{"v": 1, "type": "run", "task": json.RawMessage(`{"taskId":"a"}`)}), 0, 0, 0))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, '{'})
	f.Add([]byte{0, 0, 0, 2, '{', '}'})
	f.Add([]byte{0, 0, 0, 0}) // an empty frame: an error, not the end of the stream
	run, _ := json.Marshal(map[string]any{"v": Version, "type": "run", "id": 7})
	run = append(run, `{"taskId":"a"}`...) // a run frame, its task after its JSON
	f.Add(append(binary.BigEndian.AppendUint32(nil, uint32(len(run))), run...))
	f.Fuzz(func(t *testing.T, data []byte) {
		c := NewConn(&rw{r: bytes.NewReader(data)})
		for i := 0; i < 16; i++ {
			fr, err := c.Recv()
			if err != nil {
				if errors.Is(err, io.EOF) && i == 0 && len(data) >= 4 {
					t.Fatalf("a stream of %d bytes read as empty", len(data))
				}
				return
			}
			var out bytes.Buffer
			if err := NewConn(&rw{w: &out}).Send(fr); err != nil {
				if errors.Is(err, ErrFrameTooLarge) {
					continue
				}
				t.Fatalf("a received frame cannot be sent again: %v", err)
			}
			again, err := NewConn(&rw{r: &out}).Recv()
			if err != nil {
				t.Fatalf("a frame sent again cannot be read: %v", err)
			}
			if !reflect.DeepEqual(normFrame(fr), normFrame(again)) {
				t.Fatalf("a frame changed on the way: %+v, then %+v", fr, again)
			}
		}
	})
}

// normFrame compares raw JSON members by their value, not their spacing.
func normFrame(f *Frame) string {
	b, _ := json.Marshal(f)
	var v any
	json.Unmarshal(b, &v)
	b, _ = json.Marshal(v)
	return string(b)
}

// rw is a stream over a reader and a writer.
type rw struct {
	r io.Reader
	w io.Writer
}

func (s *rw) Read(p []byte) (int, error) {
	if s.r == nil {
		return 0, io.EOF
	}
	return s.r.Read(p)
}

func (s *rw) Write(p []byte) (int, error) {
	if s.w == nil {
		return len(p), nil
	}
	return s.w.Write(p)
}
