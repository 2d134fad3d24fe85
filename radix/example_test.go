package radix_test

import (
	"fmt"

	"github.com/agentkv/agentkv/flashindex"
	"github.com/agentkv/agentkv/radix"
)

// chain turns block contents into Dynamo-style sequence hashes.
func chain(local ...uint64) []uint64 { return flashindex.AppendSequenceHashes(nil, local) }

func Example() {
	tr, _ := radix.New(radix.Config{})
	// A root agent's context: system prompt (blocks 1, 2) and a first turn.
	tr.UpdateFromMatch("root", chain(1, 2, 3, 4))
	// A subagent starts from the system prompt and goes its own way.
	tr.UpdateFromMatch("root/explore", chain(1, 2, 90, 91, 92))
	// The root's next turn extends its own context: only block 5 is new.
	tr.UpdateFromMatch("root", chain(1, 2, 3, 4, 5))

	for _, s := range []string{"root", "root/explore"} {
		sh, _ := tr.Split(s)
		path, _ := tr.Path(s, nil)
		fmt.Printf("%s: %d shared, %d unique, %d edges\n", s, sh.Shared, sh.Unique, len(path))
	}
	who, _ := tr.Sessions(chain(1, 2)[1], nil)
	fmt.Println("sessions on the system prompt:", len(who))

	tr.RemoveSession("root/explore")
	st := tr.Stats()
	fmt.Println("after the subagent ends:", st.Blocks, "blocks in", st.Nodes, "edge")
	// Output:
	// root: 2 shared, 3 unique, 2 edges
	// root/explore: 2 shared, 3 unique, 2 edges
	// sessions on the system prompt: 2
	// after the subagent ends: 5 blocks in 1 edge
}

func ExampleRawTree_Stored() {
	tr, _ := radix.NewRawTree(radix.Config{})
	c := chain(7, 8, 9)
	tr.UpdateFromMatch("s", c[:1])
	// The engine reports blocks 8 and 9 stored under block 7 while serving
	// session s's request: they join s's lineage.
	if err := tr.Stored("s", c[0], true, c[1:]); err != nil {
		panic(err)
	}
	f, _ := tr.Frontiers("s", nil)
	fmt.Println(len(f), f[0].Depth, f[0].Hash == c[2])
	// A block cannot get a second parent.
	err := tr.UpdateFromMatch("t", append(chain(5), c[1]))
	fmt.Println(err != nil)
	// Output:
	// 1 3 true
	// true
}
