#!/bin/sh
# A job for `svcq work`: the item arrives as JSON on stdin, and what is printed on stdout becomes
# the result. Output that is one JSON object is kept as is; anything else becomes {"output": "..."}.
item=$(cat)
# stderr is shown by the worker, each line prefixed with the item id.
echo "echoing item $SVCQ_ITEM_ID of $SVCQ_QUEUE (attempt $SVCQ_ATTEMPT)" >&2
printf '{"echo":%s,"id":"%s"}\n' "$item" "$SVCQ_ITEM_ID"
