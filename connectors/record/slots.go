package record

import "slices"

// Slots holds a struct value's fields by column position: what a sink
// fills before it converts each field to its column's type. A sink keeps
// one per table and fills it record by record.
type Slots struct {
	// Vals is the field of each column; Set says whether the value has it.
	Vals []Value
	Set  []bool
	// Unknown lists the fields of the last Fill that have no column, in
	// the value's order (duplicates included).
	Unknown []string
}

// NewSlots returns slots for n columns.
func NewSlots(n int) Slots {
	return Slots{Vals: make([]Value, n), Set: make([]bool, n)}
}

// Fill maps the fields of struct v onto the slots: column returns a
// field's column position, false when there is none (the field goes to
// Unknown). The last of duplicate names wins; when keep is not empty only
// its names are taken. Fill does not clear Set: slots a previous fill (or
// the caller) set stay set. It fails only when v is not a struct.
func (s *Slots) Fill(v Value, keep []string, column func(name []byte) (int, bool)) error {
	s.Unknown = s.Unknown[:0]
	return v.Range(func(name []byte, fv Value) error {
		if len(keep) > 0 && !slices.Contains(keep, string(name)) {
			return nil
		}
		i, ok := column(name)
		if !ok {
			s.Unknown = append(s.Unknown, string(name))
			return nil
		}
		s.Vals[i], s.Set[i] = fv, true
		return nil
	})
}

// FirstUnknown returns the first of the last Fill's unknown fields in
// sorted order, so that an error names the same field whatever the order
// of the value's fields, and how many distinct unknown fields there are;
// "" and 0 when every field had a column.
func (s *Slots) FirstUnknown() (string, int) {
	if len(s.Unknown) == 0 {
		return "", 0
	}
	sorted := slices.Clone(s.Unknown)
	slices.Sort(sorted)
	return sorted[0], len(slices.Compact(sorted))
}
