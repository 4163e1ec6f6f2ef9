"""Where a stream stands and where it resumes: the resume state, its fingerprint, the merge of
several trainers' positions, and the lineage record."""
