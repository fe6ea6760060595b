//! Searches over GPU assignments of a gang (issue 16 item 3): being built.
