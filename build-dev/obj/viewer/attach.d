build-dev/obj/viewer/attach.o: viewer/attach.c viewer/attach.h \
 proto/client.h /usr/include/cjson/cJSON.h proto/proto.h proto/util.h \
 proto/vtfilter.h proto/util.h proto/vtparse.h
viewer/attach.h:
proto/client.h:
/usr/include/cjson/cJSON.h:
proto/proto.h:
proto/util.h:
proto/vtfilter.h:
proto/util.h:
proto/vtparse.h:
