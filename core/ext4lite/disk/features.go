package disk

import (
	"fmt"
	"math/bits"
	"strings"
)

// Compatible features.
const (
	CompatDirPrealloc   = 0x1
	CompatImagicInodes  = 0x2
	CompatHasJournal    = 0x4
	CompatExtAttr       = 0x8
	CompatResizeInode   = 0x10
	CompatDirIndex      = 0x20
	CompatLazyBG        = 0x40
	CompatExcludeInode  = 0x80
	CompatExcludeBitmap = 0x100
	CompatSparseSuper2  = 0x200
	CompatFastCommit    = 0x400
	CompatStableInodes  = 0x800
	CompatOrphanFile    = 0x1000
)

// Incompatible features.
const (
	IncompatCompression = 0x1
	IncompatFiletype    = 0x2
	IncompatRecover     = 0x4
	IncompatJournalDev  = 0x8
	IncompatMetaBG      = 0x10
	IncompatExtents     = 0x40
	Incompat64Bit       = 0x80
	IncompatMMP         = 0x100
	IncompatFlexBG      = 0x200
	IncompatEAInode     = 0x400
	IncompatDirData     = 0x1000
	IncompatCsumSeed    = 0x2000
	IncompatLargeDir    = 0x4000
	IncompatInlineData  = 0x8000
	IncompatEncrypt     = 0x10000
	IncompatCasefold    = 0x20000
)

// Read-only compatible features.
const (
	RoCompatSparseSuper   = 0x1
	RoCompatLargeFile     = 0x2
	RoCompatBtreeDir      = 0x4
	RoCompatHugeFile      = 0x8
	RoCompatGdtCsum       = 0x10
	RoCompatDirNlink      = 0x20
	RoCompatExtraIsize    = 0x40
	RoCompatHasSnapshot   = 0x80
	RoCompatQuota         = 0x100
	RoCompatBigalloc      = 0x200
	RoCompatMetadataCsum  = 0x400
	RoCompatReplica       = 0x800
	RoCompatReadonly      = 0x1000
	RoCompatProject       = 0x2000
	RoCompatSharedBlocks  = 0x4000
	RoCompatVerity        = 0x8000
	RoCompatOrphanPresent = 0x10000
)

var compatNames = map[uint32]string{
	CompatDirPrealloc: "dir_prealloc", CompatImagicInodes: "imagic_inodes",
	CompatHasJournal: "has_journal", CompatExtAttr: "ext_attr",
	CompatResizeInode: "resize_inode", CompatDirIndex: "dir_index",
	CompatLazyBG: "lazy_bg", CompatExcludeInode: "exclude_inode",
	CompatExcludeBitmap: "exclude_bitmap", CompatSparseSuper2: "sparse_super2",
	CompatFastCommit: "fast_commit", CompatStableInodes: "stable_inodes",
	CompatOrphanFile: "orphan_file",
}

var incompatNames = map[uint32]string{
	IncompatCompression: "compression", IncompatFiletype: "filetype",
	IncompatRecover: "needs_recovery", IncompatJournalDev: "journal_dev",
	IncompatMetaBG: "meta_bg", IncompatExtents: "extent", Incompat64Bit: "64bit",
	IncompatMMP: "mmp", IncompatFlexBG: "flex_bg", IncompatEAInode: "ea_inode",
	IncompatDirData: "dirdata", IncompatCsumSeed: "metadata_csum_seed",
	IncompatLargeDir: "large_dir", IncompatInlineData: "inline_data",
	IncompatEncrypt: "encrypt", IncompatCasefold: "casefold",
}

var roCompatNames = map[uint32]string{
	RoCompatSparseSuper: "sparse_super", RoCompatLargeFile: "large_file",
	RoCompatBtreeDir: "btree_dir", RoCompatHugeFile: "huge_file",
	RoCompatGdtCsum: "uninit_bg", RoCompatDirNlink: "dir_nlink",
	RoCompatExtraIsize: "extra_isize", RoCompatHasSnapshot: "snapshot",
	RoCompatQuota: "quota", RoCompatBigalloc: "bigalloc",
	RoCompatMetadataCsum: "metadata_csum", RoCompatReplica: "replica",
	RoCompatReadonly: "read-only", RoCompatProject: "project",
	RoCompatSharedBlocks: "shared_blocks", RoCompatVerity: "verity",
	RoCompatOrphanPresent: "orphan_present",
}

// FeatureNames names the bits of mask in one of the three feature words
// ("compat", "incompat" or "ro_compat"), e2fsprogs style. Unknown bits are
// named like "FEATURE_I17".
func FeatureNames(word string, mask uint32) []string {
	names, prefix := compatNames, "FEATURE_C"
	switch word {
	case "incompat":
		names, prefix = incompatNames, "FEATURE_I"
	case "ro_compat":
		names, prefix = roCompatNames, "FEATURE_R"
	}
	var out []string
	for mask != 0 {
		bit := uint32(1) << bits.TrailingZeros32(mask)
		mask &^= bit
		if n, ok := names[bit]; ok {
			out = append(out, n)
		} else {
			out = append(out, fmt.Sprintf("%s%d", prefix, bits.TrailingZeros32(bit)))
		}
	}
	return out
}

// FeatureString is FeatureNames joined by commas.
func FeatureString(word string, mask uint32) string {
	return strings.Join(FeatureNames(word, mask), ",")
}
