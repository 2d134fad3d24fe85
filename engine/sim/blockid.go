package sim

import (
	"encoding/binary"
	"fmt"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/zeebo/xxh3"
)

// Block identities.
//
// A workload names its prompt blocks with opaque ids of W tokens each
// (trace.Workload.BlockTokens: 512 for Mooncake, 64 for Claude Code). The
// engine caches blocks of B tokens (Config.BlockSize). Each full engine
// block j gets a local hash:
//
//   - B ≤ W (W a multiple of B): block j lies inside workload block
//     h = j/(W/B) at sub-position s = j mod (W/B); its local hash is
//     XXH3-64(le64(id[h]) ‖ le64(s) ‖ le64(W/B)) with seed [idSeed];
//   - B > W (B a multiple of W): block j covers ids [j·B/W, (j+1)·B/W); its
//     local hash is XXH3-64 over those ids as le64, then le64(B/W), with
//     seed [idSeed];
//   - when an engine block reaches past the ids (a source without ids, or
//     a prompt longer than its ids) or holds generated tokens, its content
//     is unknown to the workload and private to the request: local hash
//     XXH3-64(le64(request ID) ‖ le64(j)) with seed [privateSeed].
//
// Sequence hashes chain the local hashes exactly as flashindex does
// (seq[0] = local[0], seq[j] = NextSequenceHash(seq[j−1], local[j])), so
// equal prefixes share blocks, different prefixes never do (up to 64-bit
// collisions), and an index fed the local hashes in Stored events computes
// the same sequence hashes the engine uses as its block (engine) hashes.
const (
	idSeed      uint64 = 0x5349_4d5f_4944_0001 // "SIM_ID" + 1
	privateSeed uint64 = 0x5349_4d5f_5052_0002 // "SIM_PR" + 2
)

// AppendBlockHashes appends the local and sequence hashes of the full
// engine blocks of a prompt of inputTokens tokens whose workload blocks of
// workloadTokens tokens are hashIDs, for an engine of blockSize tokens per
// block, and returns the extended slices. salt identifies the request: it
// names the blocks the ids do not cover. hashIDs is only read.
func AppendBlockHashes(local, seq []uint64, hashIDs []uint64, workloadTokens, blockSize, inputTokens int, salt uint64) ([]uint64, []uint64, error) {
	if err := checkBlockSizes(workloadTokens, blockSize); err != nil {
		return local, seq, err
	}
	if inputTokens < 0 {
		return local, seq, fmt.Errorf("%w: negative input length %d", ErrRequest, inputTokens)
	}
	n := inputTokens / blockSize
	parent, hasParent := uint64(0), false
	for j := 0; j < n; j++ {
		l := blockLocal(hashIDs, workloadTokens, blockSize, j, salt)
		if hasParent {
			parent = flashindex.NextSequenceHash(parent, l)
		} else {
			parent, hasParent = l, true
		}
		local = append(local, l)
		seq = append(seq, parent)
	}
	return local, seq, nil
}

// checkBlockSizes reports whether one of the two block sizes divides the
// other.
func checkBlockSizes(workloadTokens, blockSize int) error {
	if blockSize < 1 || blockSize > flashindex.MaxBlockSize {
		return fmt.Errorf("%w: engine block size %d", ErrConfig, blockSize)
	}
	if workloadTokens < 1 {
		return fmt.Errorf("%w: workload block size %d", ErrBlockSize, workloadTokens)
	}
	if workloadTokens%blockSize != 0 && blockSize%workloadTokens != 0 {
		return fmt.Errorf("%w: workload blocks of %d tokens and engine blocks of %d tokens", ErrBlockSize, workloadTokens, blockSize)
	}
	return nil
}

func blockLocal(ids []uint64, w, b, j int, salt uint64) uint64 {
	var buf [8 * 64]byte
	if b <= w {
		r := w / b
		h := j / r
		if h >= len(ids) {
			return privateLocal(salt, j)
		}
		binary.LittleEndian.PutUint64(buf[0:], ids[h])
		binary.LittleEndian.PutUint64(buf[8:], uint64(j%r))
		binary.LittleEndian.PutUint64(buf[16:], uint64(r))
		return xxh3.HashSeed(buf[:24], idSeed)
	}
	r := b / w
	lo, hi := j*r, (j+1)*r
	if hi > len(ids) {
		return privateLocal(salt, j)
	}
	var big []byte
	if 8*(r+1) <= len(buf) {
		big = buf[:0]
	} else {
		big = make([]byte, 0, 8*(r+1))
	}
	for _, id := range ids[lo:hi] {
		big = binary.LittleEndian.AppendUint64(big, id)
	}
	big = binary.LittleEndian.AppendUint64(big, uint64(r))
	return xxh3.HashSeed(big, idSeed)
}

func privateLocal(salt uint64, j int) uint64 {
	var buf [16]byte
	binary.LittleEndian.PutUint64(buf[0:], salt)
	binary.LittleEndian.PutUint64(buf[8:], uint64(j))
	return xxh3.HashSeed(buf[:], privateSeed)
}
