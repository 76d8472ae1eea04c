// Decodes KV event batches the way llm-d's indexer does
// (llm-d-kv-cache-manager, pkg/kvcache/kvevents: events.go and pool.go),
// with the library it uses (github.com/vmihailenco/msgpack/v5): the batch
// and each event as msgpack arrays whose lengths must equal the structs'
// field counts, block hashes into `any` converted as llm-d converts them.
//
// Input on stdin: one batch per line, "TOPIC SEQ HEXPAYLOAD". Output on
// stdout: one JSON object per event, {"pod", "model", "seq", "type",
// "hashes", "parent", "tokens", "block_size", "medium"}; the first
// malformed batch or event is reported on stderr with exit status 1, where
// llm-d would log it and drop the events.
package main

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// The structs as llm-d declares them: field order, types and tags.
type EventBatch struct {
	_                struct{} `msgpack:",array"`
	TS               float64
	Events           []msgpack.RawMessage
	DataParallelRank *int `msgpack:",omitempty"`
}

type BlockStored struct {
	_               struct{} `msgpack:",array"`
	BlockHashes     []any
	ParentBlockHash any
	TokenIds        []uint32
	BlockSize       int
	LoraID          *int    `msgpack:",omitempty"`
	Medium          *string `msgpack:",omitempty"`
}

type BlockRemoved struct {
	_           struct{} `msgpack:",array"`
	BlockHashes []any
	Medium      *string `msgpack:",omitempty"`
}

type AllBlocksCleared struct {
	_ struct{} `msgpack:",array"`
}

// As llm-d's getHashAsUint64: uint64, int64 or bytes, nothing else.
func hashAsUint64(h any) (uint64, error) {
	switch v := h.(type) {
	case uint64:
		return v, nil
	case int64:
		return uint64(v), nil
	case []byte:
		if len(v) == 0 {
			return 0, fmt.Errorf("empty hash")
		}
		if len(v) >= 8 {
			return binary.BigEndian.Uint64(v[len(v)-8:]), nil
		}
		padded := make([]byte, 8)
		copy(padded[8-len(v):], v)
		return binary.BigEndian.Uint64(padded), nil
	default:
		return 0, fmt.Errorf("unsupported hash type %T", v)
	}
}

type out struct {
	Pod       string   `json:"pod"`
	Model     string   `json:"model"`
	Seq       uint64   `json:"seq"`
	Type      string   `json:"type"`
	Hashes    []uint64 `json:"hashes"`
	Parent    *uint64  `json:"parent"`
	Tokens    []uint32 `json:"tokens"`
	BlockSize int      `json:"block_size"`
	Medium    *string  `json:"medium"`
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	enc := json.NewEncoder(os.Stdout)
	for in.Scan() {
		f := strings.Fields(in.Text())
		if len(f) != 3 {
			fail("want TOPIC SEQ HEXPAYLOAD")
		}
		// pool.go: the topic is kv@<pod>@<model>, exactly three parts.
		parts := strings.Split(f[0], "@")
		if len(parts) != 3 {
			fail("topic %q is not kv@<pod>@<model>", f[0])
		}
		seq, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			fail("seq: %v", err)
		}
		payload, err := hex.DecodeString(f[2])
		if err != nil {
			fail("payload: %v", err)
		}
		var batch EventBatch
		if err := msgpack.Unmarshal(payload, &batch); err != nil {
			fail("batch: %v", err)
		}
		for _, raw := range batch.Events {
			var union []msgpack.RawMessage
			if err := msgpack.Unmarshal(raw, &union); err != nil {
				fail("tagged union: %v", err)
			}
			if len(union) < 1 {
				fail("event without a tag")
			}
			var tag string
			if err := msgpack.Unmarshal(union[0], &tag); err != nil {
				fail("tag: %v", err)
			}
			body, err := msgpack.Marshal(union[1:])
			if err != nil {
				fail("re-marshal: %v", err)
			}
			o := out{Pod: parts[1], Model: parts[2], Seq: seq, Type: tag}
			var hashes []any
			switch tag {
			case "BlockStored":
				var bs BlockStored
				if err := msgpack.Unmarshal(body, &bs); err != nil {
					fail("BlockStored: %v", err)
				}
				hashes = bs.BlockHashes
				if bs.ParentBlockHash != nil {
					p, err := hashAsUint64(bs.ParentBlockHash)
					if err != nil {
						fail("parent: %v", err)
					}
					o.Parent = &p
				}
				o.Tokens, o.BlockSize, o.Medium = bs.TokenIds, bs.BlockSize, bs.Medium
			case "BlockRemoved":
				var br BlockRemoved
				if err := msgpack.Unmarshal(body, &br); err != nil {
					fail("BlockRemoved: %v", err)
				}
				hashes, o.Medium = br.BlockHashes, br.Medium
			case "AllBlocksCleared":
				var ac AllBlocksCleared
				if err := msgpack.Unmarshal(body, &ac); err != nil {
					fail("AllBlocksCleared: %v", err)
				}
			default:
				fail("unknown tag %q", tag)
			}
			o.Hashes = []uint64{}
			for _, h := range hashes {
				v, err := hashAsUint64(h)
				if err != nil {
					fail("%s hash: %v", tag, err)
				}
				o.Hashes = append(o.Hashes, v)
			}
			if err := enc.Encode(o); err != nil {
				fail("write: %v", err)
			}
		}
	}
	if err := in.Err(); err != nil {
		fail("read: %v", err)
	}
}
