build-dev/obj/proto/call.o: proto/call.c proto/client-int.h \
 proto/client.h /usr/include/cjson/cJSON.h proto/util.h
proto/client-int.h:
proto/client.h:
/usr/include/cjson/cJSON.h:
proto/util.h:
