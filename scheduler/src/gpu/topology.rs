//! The cluster GPU topology tree and msc(i, j) (issue 16 item 1): being built.
